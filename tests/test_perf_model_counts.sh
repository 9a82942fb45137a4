#!/usr/bin/env bash
# bench/perf_model.py's port of the activation count against the model's own
# (model/counts.c through `sluice plan --json`, memory mode none, one GPU) for every shipped
# config (and tiny.json with a shared expert and a dense layer), bf16 and fp32: the per-layer sum and the shared part plus workspaces must agree to
# the byte, so docs/performance.md's memory table counts what the model allocates.
# usage: test_perf_model_counts.sh SLUICE_BINARY SOURCE_DIR WORKDIR
set -uo pipefail
# shellcheck source=tests/cli_lib.sh
. "$(dirname "$0")/cli_lib.sh"
sluice=$1
src=$(cd "$2" && pwd)
python_test_start "$3"
# and configs/tiny.json with a shared expert and a dense layer (no shipped config has them)
/usr/bin/python3 - "$src/configs/tiny.json" >tiny-shared.json <<'PY' || fail "cannot write tiny-shared.json"
import json, sys
c = json.load(open(sys.argv[1]))
c["model"]["shared_expert_intermediate_size"] = 96
c["model"]["mlp_only_layers"] = [1]
c["model"]["intermediate_size"] = 256
json.dump(c, sys.stdout)
PY
for cfg in "$src"/configs/*.json "$PWD/tiny-shared.json"; do
    for prec in bf16 fp32; do
        # the precision comes from the config: a copy with training.precision set
        /usr/bin/python3 - "$cfg" "$prec" >cfg.json <<'PY' || fail "$cfg: cannot copy"
import json, sys
c = json.load(open(sys.argv[1]))
c.setdefault("training", {})["precision"] = sys.argv[2]
c.setdefault("backend", {})["name"] = "cuda"  # bf16 needs it; the plan allocates nothing
json.dump(c, sys.stdout)
PY
        "$sluice" plan cfg.json --gpus 1 --ep 1 --recompute none --json >plan.json || {
            fail "$cfg ($prec): sluice plan exited $?"
            continue
        }
        /usr/bin/python3 - "$src/bench" "$prec" "$cfg" <<'PY' || fail "$cfg ($prec) differs"
import json, sys
sys.path.insert(0, sys.argv[1])
import perf_model as pm
plan = json.load(open("plan.json"))
prec, name = sys.argv[2], sys.argv[3]
mc = json.load(open("cfg.json"))["model"]
T, L = plan["micro_batch_tokens"], mc["num_hidden_layers"]
act = plan["activations"]["none"]
layers = sum(pm.layer_activation_bytes(mc, l, T, prec) for l in range(L))
shared = pm.workspace_bytes(mc, T, prec)
ok = layers == act["layers_bytes"] and shared == act["shared_bytes"] + act["workspace_bytes"]
print("%s %s: layers %d (model %d), shared + workspaces %d (model %d)" % (
    name, prec, layers, act["layers_bytes"], shared, act["shared_bytes"] + act["workspace_bytes"]))
sys.exit(0 if ok else 1)
PY
    done
done
[ "$failures" = 0 ] && echo "test_perf_model_counts: all checks passed"
exit $((failures > 0))
