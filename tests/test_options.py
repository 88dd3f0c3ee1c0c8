"""The options layer: flags generated from the options dataclasses, --config/--print-config, one MAY_CHANGE table,
run directories resuming with the options they stored."""
from __future__ import annotations

import json

import pytest

from nni_lvbert.errors import UserError
from nni_lvbert.rundir import RunDir


def _stored(tmp_path, options: dict):
    run = tmp_path / "run"
    run.mkdir()
    (run / "options.json").write_text(json.dumps(options))
    return run


def test_a_run_directory_resumes_with_the_options_it_stored(tmp_path):
    import dataclasses

    from nni_lvbert.options import to_dict
    from nni_lvbert.pipeline import PipelineOptions

    run = tmp_path / "run"
    started = PipelineOptions.flat(out=str(run), size="tiny", supernet_max_steps=4, objective="electra",
                                   pretrain_max_steps=3, precision="32-true", num_workers=1, strategies=["random"])
    _stored(tmp_path, to_dict(started))
    opts = RunDir(run, "pipeline").begin(PipelineOptions(out=str(run), resume=True))
    assert opts == dataclasses.replace(started, resume=True)


def test_resume_and_overwrite_are_refused_together_in_one_place(tmp_path):
    from nni_lvbert.train_options import TrainOptions

    with pytest.raises(UserError, match="--resume and --overwrite exclude each other"):
        RunDir(tmp_path, "supernet").begin(TrainOptions(out=str(tmp_path), resume=True, overwrite=True))


def test_a_contradicting_option_names_the_flag_a_user_types(tmp_path):
    from nni_lvbert.search.run import SearchOptions

    run = _stored(tmp_path, {"strategies": ["evolution"], "out": "x"})
    with pytest.raises(UserError, match=r"--search random contradicts"):
        RunDir(run, "search").begin(SearchOptions(out=str(run), resume=True, strategies=["random"]))
    # may change between sessions: taken as given
    assert RunDir(run, "search").begin(SearchOptions(out=str(run), resume=True, threads=1)).threads == 1


# --- flags generated from the options dataclasses -----------------------------------------------------------------
def _parser(cls, **kw):
    import argparse

    from nni_lvbert.cliargs import add_options

    p = argparse.ArgumentParser(prog="t")
    add_options(p, cls, **kw)
    return p


def test_a_new_option_is_one_field():
    import dataclasses

    from nni_lvbert.cliargs import options_from_args
    from nni_lvbert.options import opt
    from nni_lvbert.supernet.train import SupernetOptions

    @dataclasses.dataclass(frozen=True)  # an options class is a frozen value
    class Extended(SupernetOptions):
        label_smoothing: float = opt(0.0, "label smoothing of the MLM loss")
        freeze: bool = opt(True, "train the embeddings too")

    p = _parser(Extended)
    help_ = p.format_help()
    assert "--label-smoothing LABEL_SMOOTHING" in help_ and "--no-freeze" in help_
    args = p.parse_args(["--label-smoothing", "0.1", "--no-freeze", "--max-steps", "3"])
    args.given = {"label_smoothing", "freeze", "max_steps"}
    opts = options_from_args(Extended, args)
    assert (opts.label_smoothing, opts.freeze, opts.max_steps, opts.sampling) == (0.1, False, 3, "spos")
    assert set(opts.given) == {"label_smoothing", "freeze", "max_steps"}


@pytest.mark.parametrize("command", [["supernet", "train"], ["supernet", "few-shot"], ["pretrain"], ["iot", "train"],
                                     ["search", "run"], ["run"], ["finetune"], ["glue"], ["study", "ranking"],
                                     ["study", "search"], ["study", "downstream"], ["data", "prepare"], ["export"],
                                     ["info"], ["iot", "eval"], ["search", "score"], ["search", "latency-table"],
                                     ["search", "nnictl"], ["search", "export"]])
def test_every_command_takes_its_flags_from_its_options_class(command):
    """Every command but `search space-json` and `init-experiment` (one flag each, beside positional words)."""
    import argparse
    import dataclasses

    from nni_lvbert.cli import build_parser
    from nni_lvbert.cliargs import options_of

    parser = build_parser()
    for name in command:
        parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
    cls = parser.get_default("options_cls")
    dests = {a.dest for a in parser._actions if a.option_strings} - {"help", "config", "print_config", "json"}
    generated = {o.name for o in options_of(cls)}
    assert dests <= generated  # no flag written by hand beside the dataclass
    fields = {f.name for f in dataclasses.fields(cls)}
    assert generated - fields <= {o.name for o in options_of(cls) if o.parent}  # nested groups only


def test_config_file_sets_options_and_the_command_line_wins(tmp_path):
    from nni_lvbert.argcheck import parse_args, with_config
    from nni_lvbert.cliargs import options_from_args
    from nni_lvbert.pipeline import PipelineOptions

    cfg = tmp_path / "run.yaml"
    cfg.write_text("size: tiny\nseed: 3\nevolution:\n  population: 8\niterations: 2\nstrategies: [random]\n")
    p, argv = _parser(PipelineOptions), ["--config", str(cfg), "--seed", "5"]
    args = with_config(p, parse_args(p, argv), argv)  # as `lvbert` reads it: the file under the typed flags
    opts = options_from_args(PipelineOptions, args)
    assert (opts.seed, opts.evolution.population, opts.evolution.iterations, opts.strategies) == (
        5, 8, 2, ["random"])
    # what the file set counts as given: a resumed run checks it against its stored options
    assert {"size", "population", "iterations", "strategies", "seed"} <= set(opts.given)


def test_what_was_typed_is_argparses_answer(tmp_path):
    """`args.given` is what argparse read (a prefix, `--opt=value`, a value equal to the default), not what differs
    from the defaults; a --config file's keys count too, and a typed flag wins over the file."""
    from nni_lvbert.argcheck import parse_args, with_config
    from nni_lvbert.cli import build_parser

    argv = ["supernet", "train", "--max-st", "1500", "--out=x", "--no-progress", "--seed", "0"]
    assert parse_args(build_parser(), argv).given == {"max_steps", "out", "progress", "seed"}
    (tmp_path / "c.yaml").write_text("max_steps: 7\nlr: 0.01\n")
    argv += ["--config", str(tmp_path / "c.yaml")]
    parser = build_parser()
    args = with_config(parser, parse_args(parser, argv), argv)
    assert (args.max_steps, args.lr, args.seed) == (1500, 0.01, 0) and args.given == {
        "max_steps", "out", "progress", "seed", "config", "lr"}


@pytest.mark.parametrize("text, message", [
    ("max_step: 7\n", "unknown option 'max_step' (did you mean max_steps?)"),
    ("max_steps: seven\n", "max_steps must be an integer, got 'seven'"),
    ("sampling: foo\n", "sampling must be one of spos, fair, got 'foo'"),
    ("resume: 1\n", "resume must be true or false, got 1"),
    ("- 1\n- 2\n", "expected a mapping of option names to values, got list"),
    ("a: [\n", "not valid YAML"),
])
def test_a_bad_config_file_is_one_error_line(tmp_path, capsys, text, message):
    from nni_lvbert.cli import main
    from tests.conftest import one_error

    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text)
    one_error(capsys, main(["supernet", "train", "--config", str(cfg), "--out", str(tmp_path / "run")]), message)
    assert not (tmp_path / "run").exists()


def test_print_config_round_trips_through_config(tmp_path, capsys):
    from nni_lvbert.cli import main

    assert main(["search", "run", "--population", "6", "--search", "random", "evolution", "--no-prefix-cache",
                 "--print-config"]) == 0
    first = capsys.readouterr().out
    (tmp_path / "c.yaml").write_text(first)
    assert main(["search", "run", "--config", str(tmp_path / "c.yaml"), "--print-config"]) == 0
    assert capsys.readouterr().out == first
    assert "population: 6" in first and "prefix_cache: false" in first and "- random" in first


def test_a_contradicting_negative_flag_is_named_as_typed(tmp_path):
    from nni_lvbert.study.ranking import RankingOptions

    run = _stored(tmp_path, {"baselines": True, "out": "x"})
    with pytest.raises(UserError, match=r"--no-baselines False contradicts"):
        RunDir(run, "study").begin(RankingOptions(out=str(run), resume=True, baselines=False))


def test_config_reaches_commands_that_read_their_flags_directly(tmp_path, capsys):
    from nni_lvbert.cli import main

    (tmp_path / "info.yaml").write_text("arch: bert\nsize: tiny\n")
    assert main(["info", "--config", str(tmp_path / "info.yaml"), "--json"]) == 0
    out = capsys.readouterr().out
    assert '"size": "tiny"' in out and "sfsfsf" in out


def test_config_reads_a_custom_flag_text_as_the_flag_does(tmp_path):
    from nni_lvbert.cliargs import read_config
    from nni_lvbert.study.downstream import DownstreamOptions

    (tmp_path / "d.yaml").write_text("archs: bert,sandwich\ntasks: [rte]\n")
    assert read_config(DownstreamOptions, str(tmp_path / "d.yaml")) == {"archs": ["bert", "sandwich"], "tasks": ["rte"]}


def test_print_config_shows_the_size_and_presets_a_run_would_use(capsys):
    """No `size: null`: the space's size (or the one given) and every preset value written out, as a run stores
    them."""
    from nni_lvbert.cli import main

    assert main(["supernet", "train", "--print-config"]) == 0
    default = capsys.readouterr().out
    assert "size: small" in default and "max_steps: 2000000" in default and "null" not in default.split("size:")[1][:5]
    assert main(["supernet", "train", "--size", "tiny", "--print-config"]) == 0
    tiny = capsys.readouterr().out
    assert "size: tiny" in tiny and "max_steps: 1500" in tiny and "ckpt_every: 100" in tiny


def test_print_config_with_resume_shows_the_stored_options(tmp_path, capsys):
    """--resume --print-config prints what the resumed run would use: the run directory's options, a may-change
    option as given, a contradicting one refused as the run refuses it (not the defaults of a fresh run)."""
    from nni_lvbert.cli import main
    from nni_lvbert.options import to_dict
    from nni_lvbert.supernet.train import SupernetOptions

    run = _stored(tmp_path, to_dict(SupernetOptions(out="x", size="tiny", max_steps=200).resolve()))
    assert main(["supernet", "train", "--out", str(run), "--resume", "--devices", "2", "--print-config"]) == 0
    shown = capsys.readouterr().out
    assert "size: tiny" in shown and "max_steps: 200" in shown and "devices: '2'" in shown
    assert main(["supernet", "train", "--out", str(run), "--resume", "--max-steps", "9", "--print-config"]) == 2
    assert "--max-steps 9 contradicts" in capsys.readouterr().err


def test_overwrite_names_the_options_it_replaces(tmp_path, capsys):
    """--overwrite of a run with other options says which (the replaced run's values are not carried over)."""
    from nni_lvbert.options import to_dict
    from nni_lvbert.supernet.train import SupernetOptions

    run = _stored(tmp_path, to_dict(SupernetOptions(out="x", size="tiny", max_steps=200)))
    (run / "junk").write_text("old")
    RunDir(run, "supernet").open(SupernetOptions(out=str(run), overwrite=True))
    err = capsys.readouterr().err
    assert f"note: --overwrite replaces {run}, a run with other options: size 'tiny' -> None, max_steps 200 -> None" \
        in err
    assert not (run / "junk").exists() and json.loads((run / "options.json").read_text())["max_steps"] is None


def test_help_shows_the_checkpoint_interval_of_each_preset(capsys):
    from nni_lvbert.cli import main

    with pytest.raises(SystemExit):
        main(["supernet", "train", "--help"])
    help_ = " ".join(capsys.readouterr().out.split())
    assert "--ckpt-every CKPT_EVERY write checkpoints/last.ckpt every N steps (and at Ctrl-C: the step in progress " \
           "is kept) (preset: paper 5000, tiny 100)" in help_


def test_a_misspelt_flag_is_one_did_you_mean_line_without_the_usage_block(capsys):
    """As an unknown --config key: one `error:` line naming the flag it most likely misspells (issue 41, item 4),
    and no usage block (issue 55, item 3): a hint line naming the subcommand's --help only when nothing is close."""
    from nni_lvbert.cli import main
    from tests.conftest import one_error_line

    for argv, hint, message in [
        (["supernet", "train", "--max-setps", "100"], None,
         "error: unrecognized option --max-setps (did you mean --max-steps?)"),
        (["search", "score", "--supernt=runs/x", "--arch", "bert"], None,
         "error: unrecognized option --supernt (did you mean --supernet?)"),
        (["pretrain", "--sizee", "tiny", "--zzz"], "see lvbert pretrain --help",
         "error: unrecognized options --sizee (did you mean --size?), --zzz"),  # "--zzz": nothing close
        (["info", "ccsf"], "see lvbert info --help", "error: unrecognized arguments: ccsf"),  # a stray value
    ]:
        with pytest.raises(SystemExit) as exc:
            main(argv)
        err = capsys.readouterr().err
        assert exc.value.code == 2 and "usage:" not in err, err
        assert err.splitlines() == [message] + ([hint] if hint else []), err
        assert one_error_line(err, alone=False) == message


@pytest.mark.parametrize("argv, message", [
    (["supernet", "train", "--resume", "--overwrite"],
     "error: argument --overwrite: not allowed with argument --resume"),
    (["supernet", "train", "--max-steps", "many"], "error: argument --max-steps: invalid int value: 'many'"),
    (["supernet", "train", "--sampling", "foo"], "error: argument --sampling: invalid choice: 'foo'"),
])
def test_argparses_own_errors_are_one_line_and_a_help_hint(capsys, argv, message):
    """argparse's own errors (exclusive flags, a bad value) as an unknown flag: one `error:` line and one hint line,
    not the usage block (issue 55, item 3)."""
    from nni_lvbert.cli import main

    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "usage:" not in err, err
    lines = err.splitlines()
    assert len(lines) == 2 and lines[0].startswith(message) and lines[1] == f"see lvbert {' '.join(argv[:2])} --help"


def test_input_errors_come_before_torch_nni_and_lightning_are_imported(tmp_path):
    """--size/--space/--arch typos, a missing supernet and a non-empty run directory: the command's own error line,
    in a process that never imported torch, NNI or Lightning (seconds on a loaded CPU; issue 41, item 5)."""
    import subprocess
    import sys

    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "file").write_text("x")
    nope, out = str(tmp_path / "nope"), str(tmp_path / "out")
    cases = [
        (["supernet", "train", "--size", "tinny", "--out", out], "unknown size 'tinny'; choose one of: tiny"),
        (["supernet", "train", "--space", "lvbrt", "--size", "tiny", "--out", out], "unknown search space 'lvbrt'"),
        (["supernet", "train", "--size", "tiny", "--out", str(busy)], f"{busy} is not empty"),
        (["pretrain", "--arch", "sa,ff,dc", "--size", "tiny", "--out", out], "unknown layer letter(s) ','"),
        (["pretrain", "--arch", "bert", "--size", "tiny", "--out", str(busy)], f"{busy} is not empty"),
        (["iot", "train", "--space", "lvbrt", "--out", out], "unknown search space 'lvbrt'"),
        (["search", "score", "--supernet", nope], "give the architecture to score with --arch"),
        (["search", "score", "--supernet", nope, "--arch", "bert"], f"supernet directory not found: {nope}"),
        (["export", "--supernet", nope, "--arch", "bert", "--out", out], f"supernet directory not found: {nope}"),
        (["study", "ranking", "--supernet", nope, "--out", out], f"supernet directory not found: {nope}"),
        (["run", "--size", "tinny", "--out", out], "unknown size 'tinny'"),
    ]
    code = ("import io, json, sys\nfrom contextlib import redirect_stderr\nfrom nni_lvbert.cli import main\n"
            "for argv in json.loads(sys.argv[1]):\n    err = io.StringIO()\n    with redirect_stderr(err):\n"
            "        rc = main(argv)\n"
            "    print(json.dumps([rc, err.getvalue(), sorted({'torch', 'nni', 'pytorch_lightning'} & "
            "set(sys.modules))]))\n")
    got = subprocess.run([sys.executable, "-c", code, json.dumps([argv for argv, _ in cases])], capture_output=True,
                         text=True, timeout=300)
    assert got.returncode == 0, got.stderr
    for (argv, needle), line in zip(cases, got.stdout.splitlines(), strict=True):
        rc, err, heavy = json.loads(line)
        assert rc == 2 and needle in err and err.startswith("error: ") and heavy == [], (argv, rc, err, heavy)
    assert not (tmp_path / "out").exists()


def test_an_nnictl_trial_is_still_recognised_without_importing_nni_first():
    """`in_nni_trial` answers False without importing NNI when $NNI_EXP_ID is unset (what NNI reads on import)."""
    import os
    import subprocess
    import sys

    code = "import sys\nfrom nni_lvbert.nni_compat import in_nni_trial\nprint(in_nni_trial(), 'nni' in sys.modules)"
    env = {k: v for k, v in os.environ.items() if k != "NNI_EXP_ID"}
    plain = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    trial = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                           env={**env, "NNI_EXP_ID": "abc123"})
    assert plain.stdout.split() == ["False", "False"] and trial.stdout.split() == ["True", "True"], (plain, trial)
