"""A small learnable corpus for the end-to-end tests: sentences of a tiny grammar, one per line,
deterministic from a seed. Writes train.txt and eval.txt in the current directory.

usage: /usr/bin/python3 grammar_corpus.py SEED TRAIN_SENTENCES EVAL_SENTENCES
"""
import random
import sys

seed, n_train, n_eval = (int(a) for a in sys.argv[1:4])
r = random.Random(seed)
subj = ["the king", "a servant", "my brother", "the people", "his son", "the priest"]
verb = ["went up to", "spake unto", "looked upon", "came before", "blessed", "followed"]
obj = ["the city", "the mountain", "the house of god", "the river", "the temple", "the gate"]


def text(n):
    return "\n".join(f"{r.choice(subj)} {r.choice(verb)} {r.choice(obj)}." for _ in range(n)) + "\n"


open("train.txt", "w").write(text(n_train))
open("eval.txt", "w").write(text(n_eval))
