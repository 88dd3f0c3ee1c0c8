"""The options layer: one MAY_CHANGE/FLAGS table, the one resume/overwrite rule (RunDir.begin), and run
directories of the previous release resuming under the renamed options."""
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


def test_older_run_directories_resume_under_the_new_option_names(tmp_path):
    from nni_lvbert.finetune.run import FinetuneOptions
    from nni_lvbert.pipeline import PipelineOptions
    from nni_lvbert.study.downstream import DownstreamOptions
    from nni_lvbert.study.ranking import RankingOptions

    run = _stored(tmp_path, {"run_dir": "old", "steps": 4000, "archs": 8, "quick": False})
    opts = RunDir(run, "study").begin(RankingOptions(out=str(run), resume=True))
    assert (opts.max_steps, opts.num_archs, opts.out) == (4000, 8, str(run))
    (run / "options.json").write_text(json.dumps({"archs": ["bert", "sandwich"], "ft_seeds": [0, 1]}))
    opts = RunDir(run, "study").begin(DownstreamOptions(out=str(run), resume=True))
    assert opts.archs == ["bert", "sandwich"] and opts.finetune_seeds == [0, 1]  # `archs` is still a list here
    (run / "options.json").write_text(json.dumps({"seeds": [3, 4], "tasks": ["rte"]}))
    assert RunDir(run, "finetune").begin(FinetuneOptions(out=str(run), resume=True)).seeds == [3, 4]
    (run / "options.json").write_text(json.dumps({"pretrain": "electra", "supernet_steps": 4, "pretrain_steps": 3}))
    opts = RunDir(run, "pipeline").begin(PipelineOptions(out=str(run), resume=True))
    assert (opts.objective, opts.supernet_max_steps, opts.pretrain_max_steps) == ("electra", 4, 3)


def test_resume_and_overwrite_are_refused_together_in_one_place(tmp_path):
    from nni_lvbert.training import TrainOptions

    with pytest.raises(UserError, match="--resume and --overwrite exclude each other"):
        RunDir(tmp_path, "supernet").begin(TrainOptions(out=str(tmp_path), resume=True, overwrite=True))


def test_a_contradicting_option_names_the_flag_a_user_types(tmp_path):
    from nni_lvbert.search.run import SearchOptions

    run = _stored(tmp_path, {"strategies": ["evolution"], "out": "x"})
    with pytest.raises(UserError, match=r"--search random contradicts"):
        RunDir(run, "search").begin(SearchOptions(out=str(run), resume=True, strategies=["random"]))
    # may change between sessions: taken as given
    assert RunDir(run, "search").begin(SearchOptions(out=str(run), resume=True, threads=1)).threads == 1
