"""The budget check so far, before the study's short:4000 ranker has every model: each order whose 4,000-step seed-0
model is finished, against its seed-0 1,500-step ground-truth model, both scored as `lvbert study ranking` scores them
(whole validation split, full masking; kept in the model store). Prints Kendall tau overall, with convolution and
among the mixed orders.  python scripts/budget_check_partial.py [score]   (score: score the finished models first)
"""
import json
import sys
from pathlib import Path
from scipy.stats import kendalltau
import torch
torch.set_num_threads(1)
from nni_lvbert.study.store import Validation
from nni_lvbert.study.common import ALL_TOKENS
from nni_lvbert.config import ModelConfig

store = Path("runs/study/models")
cfg = ModelConfig(**json.loads(Path("runs/quickstart/supernet/model_config.json").read_text()))
data = str(Path.home() / ".cache/nni-lvbert/data/embedded-v8192-L64-dc5ee4232625afcb")
v = Validation.load(data, cfg, ALL_TOKENS, masking="full", data_seed=0)
print("key", v.key(), flush=True)
steps = lambda d: json.loads((d / "options.json").read_text()).get("max_steps")
done = {}
for d in sorted(store.glob("*-mlm-seed0-*")):
    if (d / "meta.json").is_file():
        done.setdefault(d.name.split("-")[0], {})[steps(d)] = d
pairs = {a: s for a, s in done.items() if 4000 in s and 1500 in s}
if len(sys.argv) > 1 and sys.argv[1] == "score":
    v.metrics_all([s[4000] for s in pairs.values()], "4000-step ")
rows = []
for a, s in pairs.items():
    f = s[4000] / "scores" / f"{v.key()}.json"
    if f.is_file():
        rows.append((a, v.metrics(s[1500])["mlm_acc"], json.loads(f.read_text())["metrics"]["mlm_acc"]))
mixed = [r for r in rows if "s" in r[0] and "c" in r[0]]
conv = [r for r in rows if "c" in r[0]]
out = {"orders": len(rows), "tau_1500_vs_4000": kendalltau([r[1] for r in rows], [r[2] for r in rows]).statistic,
       "conv_orders": len(conv), "tau_conv": kendalltau([r[1] for r in conv], [r[2] for r in conv]).statistic if len(conv) > 2 else None,
       "mixed_orders": len(mixed), "tau_mixed": kendalltau([r[1] for r in mixed], [r[2] for r in mixed]).statistic if len(mixed) > 2 else None,
       "rows": [(a, round(x, 4), round(y, 4)) for a, x, y in sorted(rows, key=lambda r: -r[2])]}
print(json.dumps(out, indent=1))
