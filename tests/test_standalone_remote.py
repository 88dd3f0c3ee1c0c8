"""A study's stand-alone trainings on NNI's `remote` training service (issue #42): a private sshd on 127.0.0.1 (a
free port, a throwaway host key and client key in tmp, the system's /etc/ssh and ~/.ssh untouched) stands for an SSH
machine; `lvbert study ranking --nnictl DIR` writes the experiment, the test edits only its training service as a
user would (docs/guide/studies.md, "Remote machines over SSH"), `nnictl create` trains 2 tiny models through SSH (2 of
the study's 3 keys: a rank correlation needs 3 orders), each reporting its key and the final accuracy its meta.json in
the store holds, and `lvbert study ranking --models STORE` then reads those keys, trains only the third and scores
all three.
Where sshd is missing or cannot start, the test skips with one line saying why."""
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from nni_lvbert.cli import main
from nni_lvbert.nni_compat import REMOTE_WORKER_ENV, remote_trial_keeper_pids
from tests.conftest import free_port, run_cli
from tests.nnictl_helpers import create_experiment, metric_data, metric_value, stop_experiment, wait_for_trials

# 3 orders x 1 seed at the --quick budget (30 steps), as small as the local nnictl test's models
STUDY = ["--quick", "--num-archs", "3", "--no-baselines", "--num-seeds", "1", "--no-progress"]
SSHD = os.environ.get("LVBERT_TEST_SSHD") or "/usr/sbin/sshd"  # absolute: sshd re-executes itself
PRIVSEP = Path("/run/sshd")  # OpenSSH's compiled-in privilege separation directory (needed when run as root)


def _start_sshd(root: Path) -> tuple[subprocess.Popen | None, int, str]:
    """(process, port, why not) of `sshd -D -f root/sshd_config -p PORT` on 127.0.0.1, keys and home in `root`."""
    keygen = shutil.which("ssh-keygen")
    if not Path(SSHD).is_file() or keygen is None:
        missing = SSHD if not Path(SSHD).is_file() else "ssh-keygen"
        return None, 0, f"no {missing} here (apt-get install openssh-server; LVBERT_TEST_SSHD=PATH for another sshd)"
    for name in ("host_key", "client_key"):
        subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-f", str(root / name)], check=True,
                       capture_output=True, timeout=30)
    (root / "home").mkdir()
    # the remote side's environment: a private HOME (NNI keeps its remote files in ~/nni-experiments), one thread
    # per trial, and REMOTE_WORKER_ENV (nni_compat: NNI's worker start runs `pip install nni --upgrade`)
    env = {"HOME": str(root / "home"), "OMP_NUM_THREADS": "1", **REMOTE_WORKER_ENV}
    (root / "sshd_config").write_text("\n".join([
        "ListenAddress 127.0.0.1", f"HostKey {root / 'host_key'}", f"AuthorizedKeysFile {root / 'client_key.pub'}",
        f"PidFile {root / 'sshd.pid'}", "StrictModes no", "UsePAM no", "PubkeyAuthentication yes",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no", "PermitRootLogin prohibit-password",
        "Subsystem sftp internal-sftp", "SetEnv " + " ".join(f"{k}={v}" for k, v in env.items()), ""]))
    port = free_port()
    log = (root / "sshd.log").open("w")
    with log:
        proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(root / "sshd_config"), "-p", str(port)],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 15
    while time.time() < deadline:
        if proc.poll() is not None:
            lines = [x for x in (root / "sshd.log").read_text().splitlines() if x.strip()]
            return None, 0, f"sshd exited ({proc.returncode}): {lines[-1] if lines else 'no output'}"
        if "Server listening" in (root / "sshd.log").read_text():
            return proc, port, ""
        time.sleep(0.1)
    proc.kill()
    proc.wait()
    return None, 0, "sshd did not listen within 15 s"


@pytest.fixture
def sshd(tmp_path):
    """A private sshd for the current user on 127.0.0.1; skips in one line where it cannot start."""
    try:
        user = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        pytest.skip("sshd: the current uid has no passwd entry to log in as")
    root = tmp_path / "ssh"
    root.mkdir()
    made_privsep = False
    if os.geteuid() == 0 and Path(SSHD).is_file() and not PRIVSEP.is_dir():
        try:  # what the openssh-server service creates at every start (an empty root-owned directory)
            PRIVSEP.mkdir(mode=0o755)
            made_privsep = True
        except OSError as exc:
            pytest.skip(f"sshd needs {PRIVSEP}, which cannot be created: {exc.strerror}")
    proc, port, why = _start_sshd(root)
    if proc is None:
        if made_privsep:
            PRIVSEP.rmdir()
        pytest.skip(f"remote training service not tested: {why}")
    try:
        yield {"port": port, "user": user, "key": root / "client_key", "home": root / "home"}
    finally:
        for pid in remote_trial_keeper_pids(root / "home"):  # NNI's detached trial keeper, if `nnictl stop` left it
            try:
                os.killpg(pid, signal.SIGTERM)
            except OSError:
                pass
        os.killpg(proc.pid, signal.SIGTERM)  # the listener; its session children end with their connections
        proc.wait(timeout=30)
        if made_privsep:
            try:
                PRIVSEP.rmdir()
            except OSError:
                pass


@pytest.mark.slow
def test_nnictl_remote_over_ssh_trains_the_models_the_study_then_reads(tiny, tmp_path, capsys, one_thread, sshd):
    store = tmp_path / "store"
    exp = tmp_path / "exp"
    code = main(["study", "ranking", "--nnictl", str(exp), "--supernet", str(tiny["run"]), *STUDY,
                 "--models", str(store), "--out", str(tmp_path / "study")])
    assert code == 0, capsys.readouterr().err
    space = json.loads((exp / "standalone_space.json").read_text())
    *keys, rest = space["model"]["_value"]  # the experiment trains 2 of the 3 (a narrowed space), the study the 3rd
    assert len(keys) == 2
    space["model"]["_value"] = keys
    (exp / "standalone_space.json").write_text(json.dumps(space))
    # the user's edit: the training service only (as docs/guide/studies.md shows it), plus a private working dir
    config = exp / "standalone.yml"
    values = yaml.safe_load(config.read_text())
    values["trainingService"] = {
        "platform": "remote",
        "nniManagerIp": "127.0.0.1",  # where the remote trial keepers connect back to nnictl's port
        "machineList": [{"host": "127.0.0.1", "port": sshd["port"], "user": sshd["user"],
                         "sshKeyFile": str(sshd["key"]), "pythonPath": str(Path(sys.executable).parent)}]}
    values["experimentWorkingDirectory"] = str(tmp_path / "nni")
    config.write_text(yaml.safe_dump(values, sort_keys=False))
    port, started = free_port(), time.time()
    exp_id = create_experiment(config, exp / "bind_localhost.js", port)
    try:
        jobs = wait_for_trials(port, len(keys), timeout=240)
        took = time.time() - started
        metrics = metric_data(port)
    finally:
        stop_experiment(exp_id)
    remote = sshd["home"] / "nni-experiments" / exp_id
    assert remote.is_dir()  # the trials ran on the SSH side (its HOME), not in the local working directory
    statuses = sorted(j["status"] for j in jobs)
    if statuses != ["SUCCEEDED"] * len(keys):
        logs = "\n".join(f"{p}: {p.read_text()[-1500:]}" for p in remote.rglob("trial.stderr"))
        manager = next((tmp_path / "nni").glob(f"{exp_id}/log/nnimanager.log"), None)
        raise AssertionError(f"{jobs}\n{logs}\n{manager.read_text()[-3000:] if manager else ''}")
    final = {m["trialJobId"]: metric_value(m) for m in metrics if m["type"] == "FINAL"}
    reported = {f["model"]: f for f in final.values()}
    assert sorted(reported) == sorted(keys)
    assert all(r["steps"] == 30 and r["trained"] == 1 and 0 <= r["default"] <= 1 for r in reported.values())
    assert all((store / key / "meta.json").is_file() for key in keys)

    # the study in process on the experiment's store: the same keys, the scores the trials reported; it trains only
    # the model the experiment left out
    code, _, err = run_cli(["study", "ranking", "--supernet", str(tiny["run"]), *STUDY, "--rankers", "zc:synflow",
                            "--json", "--models", str(store), "--out", str(tmp_path / "study")], capsys)
    assert code == 0, err
    assert err.count("stand-alone MLM training of") == 1, err
    truth = json.loads((tmp_path / "study" / "ground_truth.json").read_text())["models"]
    assert sorted(truth) == sorted([*keys, rest])
    for key in keys:  # the models the study scored are the ones the trials trained and reported
        final = json.loads((store / key / "meta.json").read_text())["final"]
        assert reported[key]["default"] == pytest.approx(final["val_mlm_acc"], rel=1e-5, abs=1e-6)
        assert 0 <= truth[key]["score"] <= 1 and truth[key]["score"] == truth[key]["mlm_acc"]
    print(f"nnictl remote (SSH to 127.0.0.1) experiment of {len(keys)} models: {took:.0f} s from nnictl create to "
          "the last trial's end")
