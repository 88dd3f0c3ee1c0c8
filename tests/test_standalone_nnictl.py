"""A study's stand-alone trainings as an NNI experiment (`lvbert study ranking --nnictl DIR`,
experiments/standalone.yml, `python -m nni_lvbert.study.trial`): the written folder, the trial's one-line errors,
and a real `nnictl create` (local training service, 2 trials at a time) whose models `lvbert study ranking` then
reads with the same keys and the same scores as when it trains them itself."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from nni_lvbert.cli import main
from nni_lvbert.resources import EXPERIMENT_FILES, STANDALONE_CONFIG
from nni_lvbert.study import nnictl as writer
from tests.conftest import free_port, one_error_line, run_cli
from tests.nnictl_helpers import create_experiment, metric_data, metric_value, stop_experiment, wait_for_trials

# 4 orders x 1 seed at the --quick budget (30 steps)
STUDY = ["--quick", "--num-archs", "4", "--no-baselines", "--num-seeds", "1", "--no-progress"]


def _write(tiny, tmp_path, capsys, *extra):
    args = ["ranking", "--nnictl", str(tmp_path / "exp"), "--supernet", str(tiny["run"]), *STUDY,
            "--models", str(tmp_path / "store"), "--out", str(tmp_path / "study"), *extra]
    code = main(["study", *args])
    _out, err = capsys.readouterr()
    assert code == 0, err
    return tmp_path / "exp"


def _trial(exp: Path, *args, env=None):
    return subprocess.run([sys.executable, "-m", "nni_lvbert.study.trial", "--specs", "models.json", *args],
                          cwd=exp, capture_output=True, text=True, timeout=240, env=env)


def test_the_written_experiment_has_the_studys_keys_and_the_shipped_config(tiny, tmp_path, capsys, one_thread):
    from nni_lvbert.study.ranking import RankingOptions, plan_ranking, standalone_specs, study_common

    assert STANDALONE_CONFIG in EXPERIMENT_FILES  # init-experiment and the wheel carry the template
    exp = _write(tiny, tmp_path, capsys, "--trial-concurrency", "3")
    config = yaml.safe_load((exp / "standalone.yml").read_text())
    shipped = yaml.safe_load(STANDALONE_CONFIG.read_text())
    assert config == dict(shipped, trialConcurrency=3)
    assert config["tuner"] == {"name": "GridSearch"} and config["trainingService"]["platform"] == "local"
    assert config["searchSpaceFile"] == "standalone_space.json" and config["trialCodeDirectory"] == "."
    models = json.loads((exp / "models.json").read_text())
    space = json.loads((exp / "standalone_space.json").read_text())
    assert space == {"model": {"_type": "choice", "_value": list(models["models"])}}
    assert models["store"] == str((tmp_path / "store").resolve()) and not (tmp_path / "study").exists()
    assert (exp / "bind_localhost.js").read_text() == STANDALONE_CONFIG.with_name("bind_localhost.js").read_text()
    # the keys the study trains in process, in its order (seed-major)
    opts = RankingOptions(supernet=str(tiny["run"]), quick=True, num_archs=4, baselines=False, num_seeds=1,
                          out=str(tmp_path / "study"))
    plan = plan_ranking(opts)
    opts, k, budget, ref, orders = plan.opts, plan.k, plan.budget, plan.ref, plan.orders
    expected = [s.dirname() for _, s in standalone_specs(orders, range(k), budget=budget, **study_common(opts, ref))]
    assert list(models["models"]) == expected and len(expected) == 4
    spec = writer.spec_from_json(models["models"][expected[0]]["spec"])
    assert spec.dirname() == expected[0] and spec.budget.steps == 30
    # written again (another ranker): the edited config is kept, the models and the space are rewritten
    (exp / "standalone.yml").write_text((exp / "standalone.yml").read_text() + "# my edit\n")
    _write(tiny, tmp_path, capsys, "--rankers", "spos", "short:10")
    assert (exp / "standalone.yml").read_text().endswith("# my edit\n")
    again = json.loads((exp / "models.json").read_text())["models"]
    assert list(again)[:4] == expected and len(again) == 8
    assert all(m["spec"]["budget"]["steps"] == 10 for m in list(again.values())[4:])
    # bad input: one line
    code = main(["study", "ranking", "--nnictl", str(exp), "--supernet", str(tiny["run"]), *STUDY,
                        "--trial-concurrency", "0"])
    assert code == 2 and "--trial-concurrency" in one_error_line(capsys.readouterr().err, alone=False)
    code = main(["study", "ranking", "--nnictl", str(exp), "--quick"])
    assert code == 2 and "--supernet" in one_error_line(capsys.readouterr().err, alone=False)


def test_a_trial_fails_with_one_error_line(tiny, tmp_path, capsys, one_thread):
    exp = _write(tiny, tmp_path, capsys)
    env = {k: v for k, v in os.environ.items() if k != "NNI_EXP_ID"}
    for args, needle in ((["--model", "nope"], "model nope is not in"),
                         ([], "give the model with --model KEY")):
        out = _trial(exp, *args, env=env)
        assert out.returncode == 2 and needle in one_error_line(out.stderr), out.stderr
    models = json.loads((exp / "models.json").read_text())
    key = next(iter(models["models"]))
    models["models"][key]["spec"]["seed"] = 7  # a spec that no longer gives its key
    (exp / "models.json").write_text(json.dumps(models))
    out = _trial(exp, "--model", key, env=env)
    assert out.returncode == 2 and "rebuilds as" in one_error_line(out.stderr), out.stderr



def test_a_trial_reports_an_electra_models_generator_accuracy(tmp_path, monkeypatch):
    """`study downstream --objective electra`'s models have no val_mlm_acc: the trial reports the generator's MLM
    accuracy (what the study scores them by); a finished model is reported, not trained."""
    from nni_lvbert.standalone.store import Standalone
    from nni_lvbert.study.common import Budget
    from nni_lvbert.study.trial import run_trial

    monkeypatch.delenv("NNI_EXP_ID", raising=False)
    spec = Standalone(arch="cccc", objective="electra", size="tiny", model_config={}, data=str(tmp_path), seed=0,
                      data_seed=0, budget=Budget(steps=30, lr=5e-4, warmup_steps=3, batch_size=8))
    writer.write_experiment(tmp_path / "exp", [("electra", spec)], tmp_path / "store")
    run = tmp_path / "store" / spec.dirname()
    run.mkdir(parents=True)
    final = {"step": 30, "val_gen_mlm_acc": 0.25, "val_gen_loss": 5.5, "val_disc_auc": 0.6}
    (run / "meta.json").write_text(json.dumps({"steps": 30, "final": final, "validation": [final]}))
    result = run_trial(tmp_path / "exp" / "models.json", spec.dirname())
    assert result["default"] == 0.25 and result["val_gen_loss"] == 5.5 and result["trained"] == 0

@pytest.mark.slow
def test_nnictl_trains_the_models_the_study_then_reads_as_its_own(tiny, tmp_path, capsys, one_thread):
    exp = _write(tiny, tmp_path, capsys)
    keys = json.loads((exp / "standalone_space.json").read_text())["model"]["_value"]
    space = {"model": {"_type": "choice", "_value": [*keys, "missing-key"]}}  # one trial that fails, loudly
    (exp / "standalone_space.json").write_text(json.dumps(space))
    config = exp / "standalone.yml"
    config.write_text(config.read_text() + f"experimentWorkingDirectory: {tmp_path / 'nni'}\n")
    port, started = free_port(), time.time()
    exp_id = create_experiment(config, exp / "bind_localhost.js", port)
    try:
        jobs = wait_for_trials(port, len(keys) + 1, timeout=300)
        metrics = metric_data(port)
    finally:
        stop_experiment(exp_id)
    took = time.time() - started
    statuses = sorted(j["status"] for j in jobs)
    assert statuses == ["FAILED"] + ["SUCCEEDED"] * len(keys), jobs
    failed = next(j for j in jobs if j["status"] == "FAILED")
    stderr = next((tmp_path / "nni").glob(f"{exp_id}/environments/*/trials/{failed['trialJobId']}/"
                                          "trial.stderr"))
    assert "model missing-key is not in models.json" in one_error_line(stderr.read_text(), alone=False)
    final = {m["trialJobId"]: metric_value(m) for m in metrics if m["type"] == "FINAL"}
    curve = [m for m in metrics if m["type"] == "PERIODICAL"]
    assert len(final) == len(keys) and len(curve) == len(keys)  # one validation per model: at its last step
    # matched by the key each trial reports, not by the job's listed parameters (NNI may cross those: nni_compat)
    reported = {f["model"]: f for f in final.values()}
    assert sorted(reported) == sorted(keys)
    assert all(r["steps"] == 30 and r["trained"] == 1 and 0 <= r["default"] <= 1 for r in reported.values())

    # the study on the nnictl store trains nothing; on an empty store it trains the same keys in process
    study = ["study", "ranking", "--supernet", str(tiny["run"]), *STUDY, "--rankers", "zc:synflow", "--json"]
    stores = {}
    for name in ("nnictl", "in-process"):
        store = tmp_path / ("store" if name == "nnictl" else "store-in-process")
        code, _, err = run_cli([*study, "--models", str(store), "--out", str(tmp_path / f"study-{name}")], capsys)
        assert code == 0, err
        assert ("stand-alone MLM training of" in err) == (name == "in-process"), err
        truth = json.loads((tmp_path / f"study-{name}" / "ground_truth.json").read_text())["models"]
        stores[name] = (store, truth)
    (_, nn_truth), (ip_store, ip_truth) = stores["nnictl"], stores["in-process"]
    assert sorted(nn_truth) == sorted(ip_truth) == sorted(keys)
    for key in keys:
        assert nn_truth[key]["score"] == pytest.approx(ip_truth[key]["score"], rel=1e-5, abs=1e-6)
        ip_final = json.loads((ip_store / key / "meta.json").read_text())["final"]
        assert reported[key]["default"] == pytest.approx(ip_final["val_mlm_acc"], rel=1e-5, abs=1e-6)
    # the experiment run again: its trials find their models finished and only report them
    out = _trial(exp, "--model", keys[0], env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert out.returncode == 0 and json.loads(out.stdout)["trained"] == 0, out.stderr
    print(f"nnictl experiment of {len(keys)} models + 1 failing: {took:.0f} s")


# --- study iot and study downstream: their stand-alone pre-trainings as the experiment ----------------------------
IOT = ["iot", "--block", "sa,ff,dc", "--quick", "--equal-tokens", "iot", "--no-progress"]  # 1 seed, M = 2


def _downstream(tiny):
    return ["downstream", "--quick", "--archs", "bert", "--pretrain-seeds", "0", "1", "--data",
            str(tiny["data"].path), "--no-progress"]


def _write_train_one_then_study(study: list[str], tmp_path, capsys, trains: str) -> list[str]:
    """`lvbert study ... --nnictl` writes the experiment and nothing else; one trial (outside nnictl) trains its
    first key; the study in process then trains only the others, into exactly the experiment's keys."""
    exp, store, out = tmp_path / "exp", tmp_path / "store", tmp_path / "out"
    where = ["--models", str(store), "--out", str(out)]
    code, stdout, err = run_cli(["study", *study, *where, "--nnictl", str(exp), "--trial-concurrency", "3", "--json"],
                                capsys)
    assert code == 0, err
    models = json.loads((exp / "models.json").read_text())
    keys = list(models["models"])
    assert json.loads(stdout) == {"study": study[0], "experiment": str(exp), "config": str(exp / "standalone.yml"),
                                  "models": len(keys), "finished": 0, "store": str(store), "kept_config": False}
    assert models["store"] == str(store.resolve()) and len(keys) == 2
    assert json.loads((exp / "standalone_space.json").read_text())["model"]["_value"] == keys
    assert yaml.safe_load((exp / "standalone.yml").read_text())["trialConcurrency"] == 3
    assert not out.exists() and not store.exists() and trains not in err  # trained nothing, --out untouched

    env = {k: v for k, v in os.environ.items() if k != "NNI_EXP_ID"} | {"OMP_NUM_THREADS": "1"}
    trial = _trial(exp, "--model", keys[0], env=env)
    assert trial.returncode == 0 and json.loads(trial.stdout)["trained"] == 1, trial.stderr
    meta = store / keys[0] / "meta.json"
    stamp = meta.stat().st_mtime_ns

    code, _, err = run_cli(["study", *study, *where], capsys)  # the same study, without --nnictl
    assert code == 0, err
    assert sorted(p.name for p in store.iterdir() if not p.name.startswith(".")) == sorted(keys)
    assert meta.stat().st_mtime_ns == stamp and err.count(trains) == 1  # the trial's model reused, the other trained
    # written again on the finished study (--resume: its stored options): every model finished
    code, stdout, err = run_cli(["study", study[0], *where, "--resume", "--nnictl", str(exp), "--json"], capsys)
    assert code == 0, err
    assert json.loads(stdout)["finished"] == 2 and json.loads(stdout)["kept_config"]
    assert list(json.loads((exp / "models.json").read_text())["models"]) == keys
    return keys


@pytest.mark.slow
def test_iot_study_writes_its_standalone_baselines_as_the_experiment(tiny, tmp_path, capsys, one_thread):
    keys = _write_train_one_then_study([*IOT, "--supernet", str(tiny["run"])], tmp_path, capsys,
                                       "stand-alone MLM training of")
    res = json.loads((tmp_path / "out" / "iot.json").read_text())
    assert sorted(f"{a}-mlm-seed0" for a in res["orders"]) == sorted(k.rsplit("-", 1)[0] for k in keys)
    assert (tmp_path / "out" / "iot" / "seed0" / "meta.json").is_file()  # IOT itself: in the study's process


@pytest.mark.slow
def test_downstream_study_writes_its_pretrainings_as_the_experiment(tiny, tmp_path, capsys, one_thread):
    keys = _write_train_one_then_study(_downstream(tiny), tmp_path, capsys, "stand-alone MLM pre-training")
    assert sorted(k.split("-")[2] for k in keys) == ["seed0", "seed1"]
    res = json.loads((tmp_path / "out" / "downstream.json").read_text())
    assert sorted(Path(p["run"]).name for p in res["rows"][0]["pretrain"]) == sorted(keys)
    assert all((tmp_path / "out" / "finetune" / f"bert-pretrain{p}" / "results.json").is_file() for p in (0, 1))
