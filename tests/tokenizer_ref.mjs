// tests/tokenizer_ref.mjs - the Hugging Face reference for sluice's tokenizer: encodes
// documents with @huggingface/tokenizers (Tokenizers.js, pure JavaScript, from npm), for
// tests/test_tokenizer_hf.sh and bench/tokenizer_bench.sh. Run from a directory whose
// node_modules holds the package (NODE_PATH does not reach ES modules, so the caller passes
// the module's directory).
//
//   node tokenizer_ref.mjs ids MODULE_DIR TOKENIZER_JSON EOD_ID IDS_OUT TEXT_OUT (KIND INPUT SHARD)...
//     KIND jsonl: each line's "text" is a document; lines: each non-empty line (without its
//     \n) is one; file: the whole file is one (inputs sharing a SHARD follow each other in
//     it, as a build of several inputs writes them). For every document: its ids and EOD_ID (-1:
//     none) as one line of IDS_OUT (what `sluice data show --ids` prints), and the document
//     as `sluice data show --text` prints it, decoded from those ids by the reference's
//     decoder, to TEXT_OUT (SHARD: the shard path the headers name).
//   node tokenizer_ref.mjs bench MODULE_DIR TOKENIZER_JSON KIND INPUT
//     times two passes over the documents with one tokenizer: the first (cold: the JIT
//     compiles, the word cache fills) and the second (warm); prints "reference cold_MB/s <x>
//     warm_MB/s <y> warm_MB_per_cpu_s <z> bytes <n> tokens <t>" (z: per CPU second of the
//     process, garbage collection included).
//   node tokenizer_ref.mjs adversarial OUT_JSONL
//     writes the adversarial documents (below) as JSONL.
import fs from "fs";
import path from "path";
import { pathToFileURL } from "url";

// Text that stresses every stage: scripts, emoji sequences, combining marks in NFC and NFD,
// digit and whitespace runs, special tokens inside text, contractions. Characters assigned
// after Unicode 14 are left out: PCRE2 10.42 (Debian 12) knows Unicode 14, Node's ICU newer.
// "'\u017F" (long s) is left out too: Oniguruma and PCRE2 match it with (?i:'s), the
// JavaScript port's ASCII-only case folding does not (docs/data.md, "Tokenizers").
const ADVERSARIAL = [
  "Hello world! It's a test: don't, won't, I'm, we'll, they've, she'd, YOU'RE, IT'S, it'S.",
  "'s 's 'S 'll 'LL 'Ll 've 're 'm 'd 't 'x ' '' ''s",
  "中文测试：你好，世界！这是一个很长的中文句子，没有空格，用来测试分词器。日本語のテキストも含まれています。カタカナ、ひらがな。",
  "العربية: مرحبا بالعالم. هذا نص عربي مع أرقام ١٢٣٤٥ و 12345، وتشكيل: مَرْحَبًا",
  "हिन्दी: नमस्ते दुनिया। यह एक परीक्षण है। क्षत्रिय श्रृंगार",
  "한국어: 안녕하세요 세계! 한글 자모 ᄀᄁ ㄱㄴㄷ 각 \u1100\u1161\u11A8",
  "ελληνικά: Καλημέρα κόσμε; русский: Привет, мир! עברית: שלום עולם",
  "emoji: 😀 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🧑🏿‍💻 ❤️ 🇯🇵🇺🇸 ✌🏻 👩🏾‍🦰 1️⃣ #️⃣ 🫠",
  "combining (NFD): e\u0301 a\u0300 o\u0308 n\u0303 A\u030A \u212B \u1E0B\u0323 q\u0307\u0323 e\u0301\u0301",
  "NFC: é à ö ñ Å ḍ̇ Ǖ",
  "digits: 1234567890123456789012345678901234567890 3.14159 1,000,000 ٣٤٥ ४५६ 12abc34 ½ ²",
  "spaces:    four spaces, \ttab\t\ttabs,\nnewline\n\nblank\r\ncrlf\r\n\r\n  trailing   \n\n\n   ",
  "   leading and \u00a0nbsp\u3000ideographic\u2003em\u2028line\u2029para\u0085nel\u180Emvs\ufeffbom end",
  "\n\n\n",
  " ",
  "x",
  "special tokens: <|endoftext|> in text, <|im_start|>user\nhi<|im_end|>\n<think>x</think> <tool_call>{}</tool_call><|endoftext|><|endoftext|>",
  "<|begin_of_text|>llama<|end_of_text|> <|eot_id|> <|start_header_id|>",
  "partial specials: <|endoftext| <|im_start <|im_end|x <think <|endoftext|<|endoftext|>>",
  "code: def f(x):\n    return x**2 + 1  # comment\n\tif (a && b || !c) { x += 1; }\n",
  "punctuation: ...!!!??? --- ___ *** ((()))[[[]]] \"quoted\" 'single' `back` ~~~ @@@ ### «» „“ —–",
  "mixed: Hello世界123abc!!! 😀text العربية123 a1b2c3",
  "urls: https://example.com/path?q=1&r=2#frag user@example.org",
  "long word: supercalifragilisticexpialidocious antidisestablishmentarianism " +
    "pneumonoultramicroscopicsilicovolcanoconiosis " + "a".repeat(300) + " " + "ab".repeat(150),
  "zero width: a\u200bb\u200cc\u200dd\u2060e \u00ad soft",
  "control: \u0001\u0002\u001f\u007f\u0080\u009f end",
  "\u4e00".repeat(400) + " " + "日本".repeat(120),
];

const [, , cmd, ...args] = process.argv;

async function loadTokenizer(moduleDir, file) {
  const entry = path.join(moduleDir, "node_modules", "@huggingface", "tokenizers", "dist",
                          "tokenizers.mjs");
  const { Tokenizer } = await import(pathToFileURL(entry).href);
  return new Tokenizer(JSON.parse(fs.readFileSync(file, "utf8")), {});
}

function documents(kind, input) {
  const text = fs.readFileSync(input, "utf8");
  if (kind === "file") return text.length ? [text] : [];
  if (kind === "lines") return text.split("\n").filter((l) => l.length > 0);
  if (kind === "jsonl")
    return text.split("\n").filter((l) => l.trim().length > 0).map((l) => JSON.parse(l).text)
        .filter((t) => t.length > 0);
  throw new Error(`unknown kind ${kind}`);
}

if (cmd === "adversarial") {
  fs.writeFileSync(args[0], ADVERSARIAL.map((t) => JSON.stringify({ text: t })).join("\n") + "\n");
} else if (cmd === "ids") {
  const [moduleDir, tokFile, eodArg, idsOut, textOut, ...specs] = args;
  const tok = await loadTokenizer(moduleDir, tokFile);
  const eod = Number(eodArg);
  const ids = [], texts = [];
  const first = new Map(); // per shard: the first token of the next document in it
  let n = 0;
  for (let i = 0; i < specs.length; i += 3) {
    const [kind, input, shard] = specs.slice(i, i + 3);
    let at = first.get(shard) ?? 0;
    for (const doc of documents(kind, input)) {
      const d = tok.encode(doc).ids;
      if (eod >= 0) d.push(eod);
      ids.push(d.join(" "));
      const t = tok.decode(d, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
      texts.push(`--- document ${++n}: ${shard}, token ${at} ---\n` + t +
                 (t.endsWith("\n") ? "" : "\n"));
      at += d.length;
    }
    first.set(shard, at);
  }
  fs.writeFileSync(idsOut, ids.join("\n") + "\n");
  fs.writeFileSync(textOut, texts.join(""));
} else if (cmd === "bench") {
  const [moduleDir, tokFile, kind, input] = args;
  const tok = await loadTokenizer(moduleDir, tokFile);
  const docs = documents(kind, input);
  const bytes = docs.reduce((s, d) => s + Buffer.byteLength(d), 0);
  const rate = [];
  let tokens = 0, cpu = 0;
  for (let pass = 0; pass < 2; pass++) {
    const t0 = performance.now(), c0 = process.cpuUsage();
    tokens = 0;
    for (const d of docs) tokens += tok.encode(d).ids.length;
    rate.push(bytes / ((performance.now() - t0) / 1000) / 1e6);
    const c = process.cpuUsage(c0);
    cpu = (c.user + c.system) / 1e6; // the process's CPU seconds (its garbage collector too)
  }
  console.log(`reference cold_MB/s ${rate[0].toFixed(3)} warm_MB/s ${rate[1].toFixed(3)} ` +
              `warm_MB_per_cpu_s ${(bytes / cpu / 1e6).toFixed(3)} bytes ${bytes} tokens ${tokens}`);
} else {
  console.error("usage: see the comment at the top of tests/tokenizer_ref.mjs");
  process.exit(2);
}
