"""The package as a wheel: built from the checkout, installed into a fresh venv and run from outside the checkout.

An editable install finds files next to the source tree whether or not they are package data; this test catches a
shipped resource (search spaces, sizes, the nnictl experiment folder: nni_lvbert/resources.py) missing from the
wheel. The fresh venv sees the test venv's third-party packages through a .pth line (no internet, so nothing is
downloaded) but neither the checkout nor the test venv's editable install of nni_lvbert.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from nni_lvbert import resources

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow  # builds and installs a wheel, then runs the installed CLI (~30 s on 2 cores)


def _run(cmd, cwd: Path, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _ok(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    root = tmp_path_factory.mktemp("wheel")
    assert not root.resolve().is_relative_to(REPO)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(OMP_NUM_THREADS="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", PYTHONWARNINGS="ignore")

    # `pip wheel .` on a copy of what it reads (an in-tree build would leave build/ in the shared checkout);
    # no build isolation: setuptools comes from the test venv, nothing is downloaded
    src = root / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, src / name)
    for name in ("nni_lvbert", *resources.RESOURCE_DIRS):  # the top-level resource folders are mapped into the package
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    dist = root / "dist"
    _ok(_run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", ".",
              "-w", dist], src, env))
    (wheel,) = dist.glob("nni_lvbert-*.whl")

    # a fresh venv; the test venv's site-packages appended as a plain path (its .pth files, the editable
    # install's finder among them, are not run), so torch, nni, pip... import but nni_lvbert only from the wheel
    venv = root / "venv"
    _ok(_run([sys.executable, "-m", "venv", "--without-pip", venv], root, env))
    python = venv / "bin" / "python"
    new_site = Path(_ok(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], root,
                             env)).strip())
    outer = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    assert not any(Path(p).resolve().is_relative_to(REPO / "nni_lvbert") for p in outer)
    (new_site / "_test_venv_packages.pth").write_text("".join(f"{p}\n" for p in outer))
    _ok(_run([python, "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed", wheel], root, env))
    return {"root": root, "wheel": wheel, "venv": venv, "python": python, "lvbert": venv / "bin" / "lvbert",
            "env": env, "outer_site": [Path(p).resolve() for p in outer]}


def test_the_wheel_ships_every_resource(installed):
    names = set(zipfile.ZipFile(installed["wheel"]).namelist())
    shipped = [*resources.EXPERIMENT_FILES, resources.SIZES_FILE, *resources.space_files()]
    assert len(resources.space_files()) >= 5
    for path in shipped:  # the repository's top-level search_spaces/ and experiments/ land inside the package
        assert path.is_file() and path.parent.name in resources.RESOURCE_DIRS
        assert path.parent.parent == REPO  # a checkout reads its own top-level folders (the source of truth)
        assert f"nni_lvbert/{path.parent.name}/{path.name}" in names


def test_installed_package_runs_from_the_venv_not_the_checkout(installed):
    """nni_lvbert, its resources and the nnictl default config resolve inside the venv; NNI accepts the packaged
    nnictl configs (relative paths resolved against the packaged folder, code directories exist)."""
    script = """
import json, sys
import nni_lvbert, nni_lvbert.resources as r
from nni_lvbert.search.nnictl import BIND_JS_FILE, DEFAULT_CONFIG
from nni.experiment.config import ExperimentConfig
canonical = {}
for f in (r.SEARCH_CONFIG, r.SUPERNET_CONFIG, r.IOT_CONFIG):
    c = ExperimentConfig.load(str(f)).canonical_copy()
    canonical[f.name] = [str(c.trial_code_directory), str(c.search_space_file),
                         str(getattr(c.tuner, "code_directory", None))]
print(json.dumps({"file": nni_lvbert.__file__, "sys_path": sys.path, "default_config": str(DEFAULT_CONFIG),
                  "bind": str(BIND_JS_FILE), "canonical": canonical,
                  "resources": [str(p) for p in (*r.EXPERIMENT_FILES, r.SIZES_FILE, *r.space_files())]}))
"""
    info = json.loads(_ok(_run([installed["python"], "-c", script], installed["root"], installed["env"])))
    venv = installed["venv"].resolve()
    assert Path(info["file"]).resolve().is_relative_to(venv)
    # nothing of the checkout is importable, the test venv's site-packages (which may live in it) aside
    in_checkout = [p for p in info["sys_path"] if p and Path(p).resolve().is_relative_to(REPO)
                   and Path(p).resolve() not in installed["outer_site"]]
    assert not in_checkout
    assert Path(info["default_config"]).resolve().is_relative_to(venv)
    assert Path(info["default_config"]).name == "search.yml" and Path(info["bind"]).is_file()
    assert len(info["resources"]) == len(resources.EXPERIMENT_FILES) + 1 + len(resources.space_files())
    for p in info["resources"]:
        assert Path(p).resolve().is_relative_to(venv) and Path(p).is_file()
    folder = Path(info["default_config"]).resolve().parent
    assert info["canonical"]["search.yml"] == [str(folder), str(folder / "search_space.json"), str(folder)]
    assert info["canonical"]["supernet.yml"][:2] == [str(folder), str(folder / "supernet_space.json")]


def test_installed_cli_info_and_init_experiment(installed):
    run = lambda *args: _run([installed["lvbert"], *args], installed["root"], installed["env"])
    out = _ok(run("info", "--arch", "bert", "--size", "tiny", "--json"))
    info = json.loads(out)
    assert info["arch"] == "sf" * 12 and info["space"] == "lvbert" and info["config"]["hidden_size"] == 64
    bad = run("info", "--arch", "bert", "--space", "nope")
    assert bad.returncode == 2 and "choose one of dc-ff, dc-sa-ff, dc-sa, lvbert, sa-ff" in bad.stderr
    from importlib.metadata import version

    assert _ok(run("--version")).strip() == f"lvbert {version('nni-lvbert')}"
    typo = run("supernet", "train", "--max-setps", "100")
    assert typo.returncode == 2  # one line, no usage block (issue 55, item 3)
    assert typo.stderr.strip().splitlines() == ["error: unrecognized option --max-setps (did you mean --max-steps?)"]

    exp = installed["root"] / "my-exp"
    _ok(run("init-experiment", "my-exp"))
    for src in resources.EXPERIMENT_FILES:
        assert (exp / src.name).read_bytes() == src.read_bytes()
    for src in resources.space_files():
        assert (exp / "search_spaces" / src.name).read_bytes() == src.read_bytes()
    again = run("init-experiment", "my-exp")
    lines = [line for line in again.stderr.splitlines() if line.strip()]
    assert again.returncode == 2 and len(lines) == 1
    assert lines[0].startswith("error: my-exp already has search.yml") and "--overwrite" in lines[0]
    (exp / "search.yml").write_text("edited\n")
    _ok(run("init-experiment", "my-exp", "--overwrite"))
    assert (exp / "search.yml").read_bytes() == resources.SEARCH_CONFIG.read_bytes()

    # an edited copy of a space is read with --space PATH
    (exp / "search_spaces" / "mine.yaml").write_text("name: mine\nslots: 4\ncandidates: [sa, ff]\nsize: tiny\n")
    mine = json.loads(_ok(run("info", "--arch", "sfsf", "--space", "my-exp/search_spaces/mine.yaml", "--json")))
    assert mine["space"] == "mine" and mine["params"]["layer_counts"] == {"sa": 2, "ff": 2}

    # NNI accepts the copied nnictl configs: their relative paths now point into my-exp
    script = """
import json, sys
from nni.experiment.config import ExperimentConfig
c = ExperimentConfig.load(sys.argv[1]).canonical_copy()
print(json.dumps([str(c.trial_code_directory), str(c.search_space_file), str(c.tuner.code_directory)]))
"""
    canonical = json.loads(_ok(_run([installed["python"], "-c", script, exp / "search.yml"], installed["root"],
                                    installed["env"])))
    assert canonical == [str(exp.resolve()), str(exp.resolve() / "search_space.json"), str(exp.resolve())]


def test_installed_cli_scores_a_supernet(installed, tiny):
    """`lvbert search score` of the installed package on a tiny supernet run directory = the in-process score."""
    from nni_lvbert.search.scorer import SupernetScorer

    run_dir = tiny["run"]  # the session's tiny supernet (conftest.py), built once for every file that reads one
    out = _ok(_run([installed["lvbert"], "search", "score", "--supernet", run_dir, "--arch", "csfgcs",
                    "--val-tokens", "1024", "--device", "cpu", "--json"], installed["root"], installed["env"]))
    result = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    expected = SupernetScorer(run_dir, val_tokens=1024, batch_size=64, prefix_cache=False, device="cpu")
    assert result["arch"] == "csfgcs"
    assert result["mlm_acc"] == pytest.approx(expected.score("csfgcs"), abs=1e-6)


TRAIN = """
import sys
sys.modules["nni_lvbert"] = None  # a transformers user: the directory's own code (trust_remote_code)
import torch
from transformers import (AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding, Trainer,
                          TrainingArguments)
src, out = sys.argv[1], sys.argv[2]
tok = AutoTokenizer.from_pretrained(src)
model = AutoModelForSequenceClassification.from_pretrained(src, num_labels=2, trust_remote_code=True)
before = model.classifier.weight.detach().clone()
texts = ["the war ended in peace", "a long history of the city", "the river is long", "peace and war"] * 4
rows = [{**tok(t), "labels": i % 2} for i, t in enumerate(texts)]
args = TrainingArguments(out + "-work", max_steps=4, per_device_train_batch_size=4, learning_rate=1e-3, report_to=[],
                         use_cpu=True, save_strategy="no", disable_tqdm=True, seed=0)
trainer = Trainer(model=model, args=args, train_dataset=rows, data_collator=DataCollatorWithPadding(tok))
trainer.train()
trainer.save_model(out)
tok.save_pretrained(out)
model.eval()
with torch.no_grad():
    probs = model(**tok(["the war ended", "a river"], return_tensors="pt", padding=True)).logits.softmax(-1)
print(json.dumps({"steps": trainer.state.global_step, "moved": float((model.classifier.weight - before).abs().max()),
                  "probs": probs.tolist()}))
""".replace("import torch", "import json, torch", 1)

PIPELINE = """
import json, sys
sys.modules["nni_lvbert"] = None
from transformers import pipeline
clf = pipeline("text-classification", model=sys.argv[1], trust_remote_code=True, top_k=None)
print(json.dumps(clf(["the war ended", "a river"])))
"""


def test_the_hf_extra_trains_with_transformers_trainer(installed, model_dir):
    """`pip install 'nni-lvbert[hf]'` brings accelerate, which transformers' Trainer needs: a saved tiny directory is
    fine-tuned by Trainer in the venv, saved, and reloaded by `pipeline("text-classification")` in a fresh process,
    which gives the trained model's probabilities."""
    meta = next(n for n in zipfile.ZipFile(installed["wheel"]).namelist() if n.endswith(".dist-info/METADATA"))
    requires = zipfile.ZipFile(installed["wheel"]).read(meta).decode()
    assert 'Provides-Extra: hf' in requires and 'Requires-Dist: accelerate>=1.1.0; extra == "hf"' in requires

    root = installed["root"] / "trainer"
    root.mkdir()
    source, out = model_dir, root / "classifier"  # the session's tiny model directory (conftest.py): read only
    env = {**installed["env"], "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(root / "modules")}
    trained = json.loads(_ok(_run([installed["python"], "-c", TRAIN, source, out], root, env)).splitlines()[-1])
    assert trained["steps"] == 4 and trained["moved"] > 0
    assert (out / "modeling_lvbert.py").is_file() and (out / "model.safetensors").is_file()
    scores = json.loads(_ok(_run([installed["python"], "-c", PIPELINE, out], root, env)).splitlines()[-1])
    for text_scores, probs in zip(scores, trained["probs"]):
        by_label = {s["label"]: s["score"] for s in text_scores}
        assert by_label == pytest.approx({"LABEL_0": probs[0], "LABEL_1": probs[1]}, abs=1e-5)
