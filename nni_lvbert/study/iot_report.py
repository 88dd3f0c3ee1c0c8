"""`lvbert study iot`'s report: iot.md (the goal, headroom, cost, per-seed and per-order tables) and iot.png, from
the result `iot.summarize` gives."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..atomic import pyplot, save_figure, write_text
from .stats import markdown_table


def pm(d: dict, sign: str = "", digits: int = 4) -> str:  # sign "+": a difference
    return f"{d['mean']:{sign}.{digits}f} ± {d['se']:.{digits}f}"


def settings_text(s: dict) -> str:
    """The IOT settings as the reports of `study iot` and `study iot-finetune` state them."""
    return (f"tau {s['tau']:g} (min {s['tau_min']:g}, decay {s['tau_decay']:g} every {s['tau_every']}), c1 (L_D) "
            f"{s['c1']:g}, c2 (L_S) {s['c2']:g}, clamp {s['clamp']:g}, Gumbel {'on' if s['gumbel'] else 'off'}")


def report(result: dict, out: Path) -> None:
    b, s, mean, goal = result["budget"], result["settings"], result["mean"], result["goal"]
    seqs = result["sequences"]
    before = "" if seqs["supernet"] is None else f" ({seqs['supernet']} training sequences before)"
    same = "the supernet's plus IOT's" if result["equal_tokens"] == "total" else "IOT's alone"
    base = goal["baseline"]
    aux = ", ".join(f"{k} {'on' if v else 'off'}" for k, v in result["auxiliary_losses"].items())
    crossfit = "oracle_crossfit" in mean  # artefacts written before the cross-fitted statistics have none
    rows = [_seed_row(p, base, crossfit) for p in result["per_seed"]]
    rows.append(["mean", pm(mean["routed"]), pm(mean["best_shared_heldout" if crossfit else "best_shared"]),
                 pm(mean["routed_minus_best_shared_heldout" if crossfit else "routed_minus_best_shared"], "+"),
                 pm(mean["oracle"])] + ([pm(mean["oracle_crossfit"]), pm(mean["routed_minus_random_at_usage"], "+")]
                                        if crossfit else [])
                + [f"{mean['agreement']:.3f}", " / ".join(f"{100 * u:.0f}" for u in mean["usage"]),
                   pm(mean["standalone"][base]), pm(goal["routed_minus_standalone"], "+"),
                   f"{mean['iot_core_minutes']:.2f}", f"{mean['baseline_core_minutes']:.2f}"])
    d = goal["routed_minus_standalone"]
    z = "n/a" if goal["z"] is None else f"{goal['z']:.2f}"
    headroom = _headroom(mean, crossfit)
    se_text = ("over seeds and the validation sampling error combined (seeds score the same validation sequences; "
               "iot.json gives se_seeds and se_validation apart)" if crossfit else
               "over seeds, or the token-level error with one seed")
    md = [f"# IOT against the best single order trained alone ({len(result['seeds'])} seed"
          f"{'s' * (len(result['seeds']) > 1)}, M = {result['m']})\n",
          f"Reference supernet `{result['supernet']}`. Orders: {', '.join(f'`{a}`' for a in result['orders'])}. "
          f"IOT: {b['steps']} steps, batch {b['batch_size']}, lr {b['lr']:g}, warm-up {b['warmup_steps']}, from the "
          f"supernet's weights{before}; each stand-alone model from scratch: "
          f"{result['standalone_budget']['steps']} steps of the same batch and schedule ({seqs['standalone']} "
          f"sequences: {same}). IOT settings: {settings_text(s)}; "
          f"auxiliary losses: {aux}. "
          f"Scored on {result['validation']['masked_tokens']} masked validation tokens "
          f"({result['validation']['masking']} masking); ± is a standard error (per seed: clustered by validation "
          f"sequence; the mean: {se_text}).\n",
          f"- **goal** (routed beats the stand-alone `{base}` by more than 2 standard errors): "
          f"**{'met' if goal['met'] else 'not met'}**: routed − stand-alone = {pm(d, '+')} (z = {z})",
          *headroom,
          f"- cost (core-minutes, mean per seed): IOT {mean['iot_core_minutes']:.2f}; the stand-alone baseline "
          f"{mean['baseline_core_minutes']:.2f} (all {result['m']} stand-alone orders "
          f"{mean['all_standalone_core_minutes']:.2f}); the reference supernet "
          + ("n/a" if result["supernet_core_minutes"] is None else f"{result['supernet_core_minutes']:.2f}"),
          "- the baseline order is the best stand-alone order on the mean over seeds, chosen on these validation "
          "tokens (in its favour)" + ("" if result["equal_tokens"] == "total" else
                                      "; with --equal-tokens iot the stand-alone models see fewer sequences than the "
                                      "IOT model (which inherits the supernet's training): in IOT's favour") + "\n",
          markdown_table(["seed", "routed", "best shared order" + (" (held out)" if crossfit else ""),
                          "routed − best shared", "oracle" + (" (in-sample)" if crossfit else "")]
                         + (["oracle (cross-fitted)", "routed − random at usage"] if crossfit else [])
                         + ["agreement", "usage %", f"stand-alone `{base}`", "routed − stand-alone", "IOT core-min",
                            "stand-alone core-min"], rows),
          markdown_table(["order", "shared weights (mean ± se)", "stand-alone (mean ± se)", "usage %"],
                         [[f"`{a}`", pm(mean["orders_shared"][a]), pm(mean["standalone"][a]),
                           f"{100 * u:.0f}"] for a, u in zip(result["orders"], mean["usage"])])]
    write_text(out / "iot.md", "\n".join(md))
    _plot(result, out / "iot.png")


def _headroom(mean: dict, crossfit: bool) -> list[str]:
    """The headroom and predictor lines (artefacts written before the cross-fitted statistics: one line)."""
    if crossfit:
        return [f"- headroom: the cross-fitted oracle (each row's order chosen on half of its masked tokens, "
                f"scored on the other half) − routed = {pm(mean['oracle_crossfit_minus_routed'], '+')}; the "
                f"in-sample oracle − routed = {pm(mean['oracle_minus_routed'], '+')} is an upper bound (its "
                "choice also fits the scored tokens' noise)",
                f"- the predictor: routed − random routing at the predictor's usage = "
                f"{pm(mean['routed_minus_random_at_usage'], '+')}; it agrees with the in-sample oracle's choice "
                f"on {mean['agreement']:.3f} of the rows (by chance {mean['agreement_by_chance']:.3f})",
                f"- routed − the best shared order chosen on the other half of the validation sequences = "
                f"{pm(mean['routed_minus_best_shared_heldout'], '+')} (chosen on the same tokens: "
                f"{pm(mean['routed_minus_best_shared'], '+')})"]
    return [f"- headroom: oracle − routed = {mean['oracle']['mean'] - mean['routed']['mean']:+.4f}; predictor "
            f"agrees with the oracle's choice on {mean['agreement']:.3f} of the instances (by chance "
            f"{mean['agreement_by_chance']:.3f})"]


def _seed_row(p: dict, base: str, crossfit: bool) -> list:
    shared = p["best_shared_heldout"] if crossfit else p["best_shared"]
    arch = " / ".join(f"`{a}`" for a in shared["arch"]) if isinstance(shared["arch"], list) else f"`{shared['arch']}`"
    return ([p["seed"], pm(p["routed"]), f"{arch} {pm(shared)}",
             pm(p["routed_minus_best_shared_heldout" if crossfit else "routed_minus_best_shared"], "+"),
             pm(p["oracle"])]
            + ([pm(p["oracle_crossfit"]), pm(p["routed_minus_random_at_usage"], "+")] if crossfit else [])
            + [f"{p['agreement']:.3f}", " / ".join(f"{100 * u:.0f}" for u in p["usage"]), pm(p["standalone"][base]),
               pm(p["standalone"][base]["routed_minus_this"], "+"),
               f"{p['core_minutes']['iot']:.2f}", f"{p['core_minutes']['standalone'][base]:.2f}"])


def _plot(result: dict, path: Path) -> None:
    mean, archs = result["mean"], result["orders"]
    bars = ([(f"{a}\nshared", mean["orders_shared"][a], "tab:blue") for a in archs]
            + [("routed", mean["routed"], "tab:green")]
            + ([("random routing\nat its usage", mean["random_at_usage"], "tab:olive"),
                ("oracle\ncross-fitted", mean["oracle_crossfit"], "tab:gray"),
                ("oracle\nin-sample", mean["oracle"], "lightgray")] if "oracle_crossfit" in mean
               else [("oracle", mean["oracle"], "tab:gray")])
            + [(f"{a}\nalone", mean["standalone"][a], "tab:orange") for a in archs])
    bar_plot(bars, path, "validation MLM accuracy (± 2 se)",
             f"IOT over {len(result['seeds'])} seed(s): shared orders, routed, oracle, stand-alone", slanted=True)


def bar_plot(bars: list, path: Path, ylabel: str, title: str, xlabel: str | None = None, cap: float | None = None,
             slanted: bool = False) -> None:
    """The IOT studies' bar chart: (name, {"mean", "se"}, colour) per bar with ± 2 standard errors; `cap` the most
    the y axis shows (an accuracy: 1); `slanted` names (24-letter orders) one line each, slanted, not overlapping."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(6.4, 0.8 * len(bars)), 4.2))
    xs = np.arange(len(bars))
    ax.bar(xs, [v["mean"] for _, v, _ in bars], yerr=[2 * v["se"] for _, v, _ in bars],
           color=[c for _, _, c in bars], capsize=3)
    lo, hi = (f(v["mean"] + sign * 2 * v["se"] for _, v, _ in bars) for f, sign in ((min, -1), (max, 1)))
    pad = 0.1 * (hi - lo + 1e-6)
    ax.set_ylim(max(0.0, lo - pad), hi + pad if cap is None else min(cap, hi + pad) + 1e-3)
    if slanted:
        ax.set_xticks(xs, [name.replace("\n", " ") for name, _, _ in bars], fontsize=7, rotation=55, ha="right",
                      rotation_mode="anchor", family="monospace")
    else:
        ax.set_xticks(xs, [name for name, _, _ in bars], fontsize=8)
    ax.set_ylabel(ylabel)
    if xlabel:
        ax.set_xlabel(xlabel, fontsize=7)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    save_figure(fig, path, dpi=110, bbox_inches="tight")
