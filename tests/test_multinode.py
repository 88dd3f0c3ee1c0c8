"""Multi-node DDP run for real: two "nodes" of one CPU device each on this machine (two processes that meet at
127.0.0.1, gloo), launched as a cluster launches them (Lightning's environment variables, torchrun once per node, or
the variables srun gives its tasks), train the very weights of one node with two devices (`--devices 2`); so does a
two-node --resume of a run killed on one node; `lvbert run` searches on node 0 only. Both nodes share this machine's
disk: only node 0 writes the run directory. Each test takes 15-35 s here."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch

from tests.conftest import free_port
from tests.test_pretrain import pretrain_args
from tests.test_supernet import train_args

REPO = Path(__file__).resolve().parent.parent
TIMEOUT = 240  # seconds per command (each takes ~20 s here, on one free core)
# what a launcher sets (and SLURM_*): none may leak in from the environment pytest runs in
LAUNCH_VARS = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "RANK", "WORLD_SIZE", "GROUP_RANK",
               "LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID", "LVBERT_RANK0_OPTIONS", "LVBERT_RUN_STAGE")


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in LAUNCH_VARS and not k.startswith("SLURM_") and k != "PYTEST_CURRENT_TEST"}
    return {**env, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1", **extra}


def _cli(*args) -> list[str]:
    return [sys.executable, "-m", "nni_lvbert.cli", *args]


def one_node_two_devices(args) -> None:
    """The reference: `lvbert ARGS --devices 2` (Lightning's launcher starts rank 1)."""
    res = subprocess.run(_cli(*args, "--accelerator", "cpu", "--devices", "2"), cwd=REPO, env=_env(),
                         capture_output=True, text=True, timeout=TIMEOUT)
    assert res.returncode == 0, res.stderr[-3000:]


def two_nodes(args_of_node, how: str) -> list[str]:
    """`lvbert ARGS --num-nodes 2 --devices 1` as node 0 and node 1, side by side; each node's stderr. `how`: "env"
    (Lightning's general-cluster variables: MASTER_ADDR, MASTER_PORT, WORLD_SIZE=2, NODE_RANK), "torchrun"
    (`python -m torch.distributed.run --nnodes 2 --nproc-per-node 1 --node-rank R ...` on each node) or "srun" (the
    variables `srun --nodes 2 --ntasks-per-node 1` gives its tasks, which Lightning's SLURMEnvironment reads; no
    SLURM here, so they are set by hand)."""
    port = free_port()
    procs, errs = [], []
    for node in (0, 1):
        args = [*args_of_node(node), "--accelerator", "cpu", "--num-nodes", "2", "--devices", "1"]
        if how == "env":
            cmd = _cli(*args)
            env = _env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", NODE_RANK=str(node))
        elif how == "srun":
            cmd = _cli(*args)
            env = _env(SLURM_NTASKS="2", SLURM_NTASKS_PER_NODE="1", SLURM_PROCID=str(node), SLURM_LOCALID="0",
                       SLURM_NODEID=str(node), SLURM_NODELIST="127.0.0.1", SLURM_JOB_ID="4242",
                       SLURM_JOB_NAME="lvbert", MASTER_PORT=str(port))
        else:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
                   "--node-rank", str(node), "--master-addr", "127.0.0.1", "--master-port", str(port),
                   "-m", "nni_lvbert.cli", *args]
            env = _env()
        err = tempfile.TemporaryFile()  # noqa: SIM115  (read and closed once every node has exited)
        errs.append(err)
        procs.append(subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=err,
                                      start_new_session=True))  # its own group: torchrun's worker is killed with it
    deadline = time.time() + TIMEOUT
    try:
        for p in procs:
            p.wait(timeout=max(1.0, deadline - time.time()))
    except subprocess.TimeoutExpired:
        pass
    timed_out = [p.poll() is None for p in procs]
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    texts = []
    for err in errs:
        err.seek(0)
        texts.append(err.read().decode(errors="replace"))
        err.close()
    for node, (p, late, text) in enumerate(zip(procs, timed_out, texts)):
        assert not late and p.returncode == 0, (f"node {node} {f'ran past {TIMEOUT} s' if late else 'failed'} "
                                                f"(exit {p.returncode}); its stderr ends:\n{text[-3000:]}")
    return texts


def assert_same_weights(a: Path, b: Path) -> bool:
    """The two safetensors files hold the same tensors (to float rounding); True when bit for bit."""
    from safetensors.torch import load_file

    x, y = load_file(a), load_file(b)
    assert x.keys() == y.keys()
    for k in x:
        torch.testing.assert_close(y[k], x[k], rtol=1e-6, atol=1e-7, msg=lambda m, k=k: f"{k}: {m}")
    return all(torch.equal(x[k], y[k]) for k in x)


def files(run: Path) -> list[str]:
    """The files of a run directory (NNI's experiment id and TensorBoard's event file name as *): written once each,
    a second writer would show as a second NNI experiment or event file."""
    import re

    names = (str(p.relative_to(run)) for p in run.rglob("*") if p.is_file())
    return sorted(re.sub(r"^nni/[a-z0-9]{8}/", "nni/*/", re.sub(r"events\.out\.tfevents\..*$", "events.*", n))
                  for n in names)


@pytest.fixture(scope="module")
def space_file(tmp_path_factory):
    f = tmp_path_factory.mktemp("space") / "small6.yaml"
    f.write_text("name: small6\nslots: 6\ncandidates: [dc, sa, ff, glu]\nsize: tiny\n")
    return f


@pytest.fixture(scope="module")
def reference(tmp_path_factory, space_file, cache_dir):
    """A 4-step supernet run on one node with two devices (and the data cache every test here reads)."""
    one = tmp_path_factory.mktemp("reference") / "one-node"
    one_node_two_devices(train_args(one, space_file, cache_dir, 4))
    return one


@pytest.mark.slow
@pytest.mark.parametrize("how", ["env", "srun"])
def test_supernet_on_two_nodes_trains_the_weights_of_one_node_with_two_devices(tmp_path, space_file, cache_dir,
                                                                                reference, how):
    """Lightning's environment variables, or srun's, and one shared run directory: the same paths on both ranks,
    the same weights as `--devices 2`, the same files (node 1 writes none: its NNI files go to a temporary
    directory; under srun, task 1 once took itself for rank 0 and refused the directory task 0 had made)."""
    one, many = reference, tmp_path / "two-nodes"
    errs = two_nodes(lambda node: train_args(many, space_file, cache_dir, 4), how)
    assert "GLOBAL_RANK: 1, MEMBER: 2/2" in errs[1]
    assert_same_weights(one / "supernet.safetensors", many / "supernet.safetensors")
    r0, r1 = (json.loads((many / "ranks" / f"rank{r}.json").read_text()) for r in (0, 1))  # --record-paths
    ref = json.loads((one / "ranks" / "rank0.json").read_text())
    assert r0["paths"] == r1["paths"] == ref["paths"] and r0["weights_sha256"] == r1["weights_sha256"]
    meta, ref_meta = (json.loads((run / "meta.json").read_text()) for run in (many, one))
    assert meta["world_size"] == 2 and meta["steps"] == 4 and meta["options"]["num_nodes"] == 2
    assert [v["step"] for v in meta["validation"]] == [v["step"] for v in ref_meta["validation"]]
    assert meta["final_val_mlm_acc"] == pytest.approx(ref_meta["final_val_mlm_acc"], abs=1e-6)
    assert files(many) == files(one)  # written once each (ranks/rank1.json: rank 1's own, --record-paths)
    assert len([p for p in (many / "nni").iterdir() if p.is_dir()]) == 1  # node 0's NNI experiment only


@pytest.mark.slow
def test_two_nodes_resume_a_run_killed_on_one(tmp_path, space_file, cache_dir, reference):
    """kill -9 of a one-node, two-device run after step 2, then exactly `lvbert supernet train --out D --resume` on
    each of two nodes (+ --num-nodes 2 --devices 1): node 1 reads the stored options from the shared run directory
    as node 0 does, and the run ends with the uninterrupted run's weights."""
    from tests.conftest import kill9_mid_training

    run = tmp_path / "killed"
    args = train_args(run, space_file, cache_dir, 4, "--accelerator", "cpu", "--devices", "2")
    assert kill9_mid_training(args, run / "checkpoints" / "last.ckpt", 2, 4) is not None
    assert not (run / "meta.json").exists()
    two_nodes(lambda node: ["supernet", "train", "--out", str(run), "--resume"], "env")
    assert_same_weights(reference / "supernet.safetensors", run / "supernet.safetensors")
    meta = json.loads((run / "meta.json").read_text())
    assert meta["world_size"] == 2 and meta["steps"] == 4 and meta["options"]["max_steps"] == 4


@pytest.mark.slow
def test_lvbert_run_on_two_nodes_searches_on_node_0_only(tmp_path, cache_dir):
    """`lvbert run --num-nodes 2` on each node: both train the supernet, node 0 alone searches; resumed after the
    search was lost, node 1 has nothing to join and ends, node 0 searches again to the same answer."""
    import shutil

    from tests.test_pipeline import run_args

    out = tmp_path / "run"
    errs = two_nodes(lambda node: run_args(out, cache_dir, 4), "env")
    assert "[2/2] search" in errs[0] and "search" not in errs[1]
    assert json.loads((out / "supernet" / "meta.json").read_text())["world_size"] == 2
    assert len((out / "search" / "history.jsonl").read_text().splitlines()) == 4 + 2 + 2  # searched once
    best = json.loads((out / "search" / "best_arch.json").read_text())
    shutil.rmtree(out / "search")
    errs = two_nodes(lambda node: ["run", "--out", str(out), "--resume", "--no-progress"], "env")
    assert "[1/2] supernet: done already" in errs[0] and "[2/2] search: running" in errs[0]
    assert f"note: {out / 'supernet'} is trained; the search runs on rank 0 only" in errs[1]
    assert json.loads((out / "search" / "best_arch.json").read_text())["compact"] == best["compact"]


def test_node_1_refuses_what_node_0_refuses(tmp_path, cache_dir, capsys, monkeypatch):
    """On a node > 0 (NODE_RANK=1, nothing published by a launcher): `lvbert run --objective` with --num-nodes 2 is
    node 0's one line, and --resume of a run directory this node does not see says it needs a shared disk (rather
    than training from scratch with the command line's defaults)."""
    from nni_lvbert.cli import main
    from nni_lvbert.ranks import RANK0_ENV, launcher_is_rank_zero
    from tests.conftest import one_error
    from tests.test_pipeline import run_args

    for var in [*LAUNCH_VARS, *(k for k in os.environ if k.startswith("SLURM_"))]:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NODE_RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert RANK0_ENV not in os.environ
    rc = main(run_args(tmp_path / "run", cache_dir, 4, "--num-nodes", "2", "--objective", "mlm"))
    one_error(capsys, rc, "--objective with several devices", "lvbert pretrain --arch")
    rc = main(["supernet", "train", "--out", str(tmp_path / "elsewhere"), "--resume", "--num-nodes", "2"])
    one_error(capsys, rc, "needs the run directory on a disk every node shares")
    assert not (tmp_path / "run").exists() and not (tmp_path / "elsewhere").exists()
    monkeypatch.delenv("NODE_RANK")
    assert launcher_is_rank_zero()
    monkeypatch.setenv("SLURM_PROCID", "1")  # srun's task 1 of a job
    assert not launcher_is_rank_zero()


@pytest.mark.slow
def test_pretrain_on_two_nodes_trains_the_weights_of_one_node_with_two_devices(tmp_path, cache_dir):
    """torchrun once per node (ELECTRA with SOP and dropout: every rank's masks, swaps and dropout seeds); node 1
    is given its own --out, as on a machine with its own disk, and writes nothing there."""
    one, many, node1 = tmp_path / "one-node", tmp_path / "two-nodes", tmp_path / "node1-out"
    extra = ("--sop", "--dropout", "0.1")
    one_node_two_devices(pretrain_args(one, cache_dir, *extra, steps=4))
    errs = two_nodes(lambda node: pretrain_args(node1 if node else many, cache_dir, *extra, steps=4), "torchrun")
    assert "GLOBAL_RANK: 1, MEMBER: 2/2" in errs[1]
    assert not node1.exists()
    assert_same_weights(one / "pretrain.safetensors", many / "pretrain.safetensors")
    meta, ref_meta = (json.loads((run / "meta.json").read_text()) for run in (many, one))
    assert meta["world_size"] == 2 and meta["steps"] == 4 and meta["options"]["num_nodes"] == 2
    assert meta["final"].keys() == ref_meta["final"].keys()
    assert all(meta["final"][k] == pytest.approx(ref_meta["final"][k], rel=1e-5, abs=1e-6) for k in meta["final"])
    assert files(many) == files(one)
