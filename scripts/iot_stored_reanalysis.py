"""What the IOT artefacts stored before issue 54 can still answer, without their models: random routing at the
predictor's usage, per seed, against routed and the in-sample oracle.

Random routing at usage u scores sum_k u_k acc_k (each row routed to order k with probability u_k, in expectation),
so it needs only each order's accuracy with the shared weights and the usage the artefact keeps. Its standard error
(paired with routed, by row) and the cross-fitted oracle need the per-row scores that only a re-run keeps
(`lvbert study iot --units DIR`).

Usage:

    python scripts/iot_stored_reanalysis.py --out docs/study/iot-stored-reanalysis   # writes .json and .md
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from nni_lvbert.atomic import write_json, write_text
from nni_lvbert.study.stats import markdown_table

STUDY = Path(__file__).resolve().parents[1] / "docs" / "study"
ARTEFACTS = ("iot", "iot-m2", "iot-m6", "iot-noaux", "iot-decay", "iot-eqiot", "iot-sotu", "iot-wiki-pairs")


def random_at_usage(usage: list[float], accuracies: list[float]) -> float:
    return float(sum(u * a for u, a in zip(usage, accuracies)))


def reanalyse(name: str) -> list[dict]:
    result = json.loads((STUDY / f"{name}.json").read_text())
    rows = []
    for p in result["per_seed"]:
        orders = p.get("orders_iot") or p["orders"]  # iot-finetune keeps the shared orders as orders_iot
        random = random_at_usage(p["usage"], [o["mean"] for o in orders])
        rows.append({"artefact": name, "seed": p["seed"], "routed": p["routed"]["mean"], "random_at_usage": random,
                     "routed_minus_random_at_usage": p["routed"]["mean"] - random,
                     "oracle_in_sample": p["oracle"]["mean"], "usage": p["usage"]})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="output path without suffix (.json and .md are written)")
    out = Path(parser.parse_args().out)
    rows = [r for name in ARTEFACTS for r in reanalyse(name)]
    write_json(out.with_suffix(".json"), {"rows": rows, "method": __doc__.split("\n\n")[1].replace("\n", " ")})
    table = markdown_table(["artefact", "seed", "routed", "random routing at its usage", "routed − random",
                            "oracle (in-sample)"],
                           [[f"`{r['artefact']}`", r["seed"], r["routed"], r["random_at_usage"],
                             f"{r['routed_minus_random_at_usage']:+.4f}", r["oracle_in_sample"]] for r in rows])
    write_text(out.with_suffix(".md"), "# IOT artefacts before issue 54: random routing at the predictor's usage\n\n"
               + __doc__.split("\n\n")[1].replace("\n", " ") + "\n\n" + table)
    print(out.with_suffix(".json"))


if __name__ == "__main__":
    main()
