"""Run directories: the one type every stage (supernet, IOT, search, pipeline) writes and reads its outputs with.

Common files (each stage adds its own):

    options.json           the options the run was started with (rank 0 writes it first; --resume reads it back)
    space.yaml             the search space
    model_config.json      ModelConfig
    tokenizer/             copy of the tokenizer (PreTrainedTokenizerFast directory)
    meta.json              written when the run finishes: data, seed, steps, validation history, timings
    checkpoints/last.ckpt  Lightning checkpoint for --resume (training stages)
    logs/                  CSV + TensorBoard logs (training stages)

Every file is written through `atomic` (a kill never leaves half a file), and a directory is refused when
non-empty unless the run is resumed or overwritten.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from .atomic import atomic_path, write_json, write_text
from .errors import UserError
from .options import MAY_CHANGE, from_dict, to_dict
from .ranks import launcher_is_rank_zero, publish, published
from .resume import differing, resume_from
from .safeio import read_json

OPTIONS = "options.json"
META = "meta.json"
CHECKPOINT = "checkpoints/last.ckpt"


def check_output_dir(out: Path, resume: bool, overwrite: bool, resume_marker: str, what: str = "run directory") -> bool:
    """Refuse a non-empty directory unless resuming (needs `resume_marker` inside) or overwriting.
    Returns True when the directory holds something `--overwrite` is to replace."""
    out = Path(out)
    if resume and overwrite:
        raise UserError("--resume and --overwrite exclude each other")
    if out.exists() and not out.is_dir():
        raise UserError(f"{what} {out} is a file")
    non_empty = out.is_dir() and any(out.iterdir())
    if resume:
        if not (out / resume_marker).is_file() and not (out / OPTIONS).is_file():
            raise UserError(f"nothing to resume in {out}: no {resume_marker}")
        return False
    if non_empty and not overwrite:
        raise UserError(f"{what} {out} is not empty; pass --resume to continue it or --overwrite to replace it")
    return non_empty


class RunDir:
    """A run's output directory: its lifecycle (`begin`, `open`), paths, stored options and atomic writes.

    Every command that writes a directory (supernet, IOT, search, pretrain, finetune/glue, studies, run) goes

        opts = RunDir(opts.out, kind).begin(opts)   # first: the directory checked, --resume's stored options
        ...                                         # check every input, build what the run needs
        run = RunDir(opts.out, kind).open(opts)     # then: emptied on --overwrite, created, options stored

    so the --resume/--overwrite rules live here and nowhere else."""

    def __init__(self, path, kind: str = "run", what: str | None = None):
        self.path = Path(path)
        self.kind = kind
        self.what = what or f"{kind} directory"  # how error lines name it

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    def __str__(self) -> str:
        return str(self.path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r}, kind={self.kind!r})"

    @property
    def is_rank_zero(self) -> bool:
        """Only the launching process (DDP rank 0) writes the directory."""
        return launcher_is_rank_zero()

    def has(self, name: str) -> bool:
        return (self.path / name).is_file()

    def state(self, done: str = META, resume_marker: str = CHECKPOINT) -> str:
        """Where a stage run stands: "done" (its finished-marker file exists), "resume" (an interrupted run left
        its resume marker) or "fresh" (nothing to continue: start it, replacing whatever partial files exist)."""
        if self.has(done):
            return "done"
        return "resume" if self.has(resume_marker) else "fresh"

    def continuation(self, done: str = META, marker: str = CHECKPOINT) -> dict | None:
        """How a command that runs this directory as one of its parts (a pipeline stage, a study's model, a
        sub-supernet) goes on with it: None when it is finished (`done` there); else the flags for that part's
        options: {"resume": True, "overwrite": False} when it holds its stored options or its `marker` (continued
        with them, see `begin`), else {"resume": False, "overwrite": <leftovers to replace>}."""
        if self.has(done):
            return None
        resume = self.has(marker) or self.has(OPTIONS)
        return {"resume": resume, "overwrite": not resume and self.path.is_dir() and any(self.path.iterdir())}

    # --- lifecycle ---------------------------------------------------------------------------------------------
    def begin(self, opts, *, marker: str = OPTIONS, stored: dict | None = None):
        """The options a run goes on with; call first, before anything is built from them.

        On a DDP rank > 0 (Lightning's launcher re-runs the command): rank 0's options (`adopt`). On rank 0: the
        directory checked against --resume/--overwrite (`check_output_dir`; a resumable run has `marker`) and, with
        --resume, the options stored in it (`stored`, else options.json) with the given ones checked against them
        (`resume.resume_from`)."""
        if not launcher_is_rank_zero():
            return self.adopt(opts)
        check_output_dir(self.path, opts.resume, opts.overwrite, marker, self.what)
        if not opts.resume:
            return opts
        if not self.has(marker):  # stopped before its first checkpoint: from the start, as it was begun
            print(f"note: {self.path} has no {marker} yet: starting it again from the beginning with its stored "
                  "options", file=sys.stderr)
        return self.resumed(opts, stored)

    def resumed(self, opts, stored: dict | None = None):
        """`opts` resumed from this directory's stored options (`stored`, else options.json): `resume_from`."""
        return resume_from(opts, stored if stored is not None else self.stored_options(), self.path)

    def adopt(self, opts):
        """Rank > 0: rank 0's options (`ranks.published`). A rank started from outside (torchrun, SLURM, another
        node) has none published: it runs its own command line, rank 0's; with --resume, the options rank 0 resumes
        with, read as rank 0 reads them, from the run directory, which every node must then see (a shared disk)."""
        options = published(self.kind)
        if options:
            return from_dict(opts, options)
        if not (getattr(opts, "resume", False) and getattr(opts, "out", None)):
            return opts
        if not self.path.is_dir() or self.stored_options() is None:
            raise UserError(f"cannot resume {self.path} on this node (rank > 0): it holds no stored options here; "
                            "--resume on several nodes needs the run directory on a disk every node shares")
        return self.resumed(opts)

    def open(self, opts, stored: dict | None = None, *, marker: str = OPTIONS) -> RunDir:
        """Once every input is checked, on rank 0: the directory emptied on --overwrite and created, the options
        stored (`stored`, else `opts`) as options.json, and published to the ranks Lightning's DDP launcher starts
        (`ranks.publish`). Other ranks only get the RunDir."""
        if self.is_rank_zero:
            options = stored if stored is not None else to_dict(opts)
            if opts.overwrite:
                self.note_replaced(options)
            self.prepare(resume=opts.resume, overwrite=opts.overwrite, resume_marker=marker)
            self.save_options(options)
            publish(self.kind, to_dict(opts))
        return self

    def note_replaced(self, options: dict) -> None:
        """--overwrite replaces a run: one line naming the options whose values differ from the replaced run's (a
        value the replaced run was given is not carried over: the new run takes its own flags and defaults)."""
        old = self.stored_options() if self.has(OPTIONS) else None
        if not old:
            return
        differ = [k for k in differing(old, options, MAY_CHANGE) if k in old]
        if differ:
            shown = ", ".join(f"{k} {old[k]!r} -> {options[k]!r}" for k in differ[:6])
            more = f" and {len(differ) - 6} more" if len(differ) > 6 else ""
            print(f"note: --overwrite replaces {self.path}, a run with other options: {shown}{more}", file=sys.stderr)

    def prepare(self, *, resume: bool, overwrite: bool, resume_marker: str = CHECKPOINT) -> None:
        """Check the directory (see check_output_dir), empty it on --overwrite, create it."""
        if check_output_dir(self.path, resume, overwrite, resume_marker, self.what):
            shutil.rmtree(self.path)
        self.path.mkdir(parents=True, exist_ok=True)

    def require(self, files, what: str | None = None) -> None:
        """One clear line when the directory is missing or lacks a file a finished run has."""
        what = what or self.kind
        if not self.path.is_dir():
            raise UserError(f"{what} directory not found: {self.path}")
        missing = [f for f in files if not (self.path / f).is_file()]
        if missing:
            raise UserError(f"{self.path} is not a finished {what} run (missing {', '.join(missing)})")

    # --- JSON / text --------------------------------------------------------------------------------------------
    def write_json(self, name: str, data) -> None:
        write_json(self.path / name, data)

    def write_text(self, name: str, text: str) -> None:
        write_text(self.path / name, text)

    def read_json(self, name: str) -> dict:
        return read_json(self.path / name, f"{self.kind} {name}")

    @property
    def meta(self) -> dict:
        return self.read_json(META)

    def stored_options(self) -> dict | None:
        """The options this run was started with (options.json; meta.json's for runs of older versions)."""
        if self.has(OPTIONS):
            return self.read_json(OPTIONS)
        if self.has(META):
            return self.read_json(META).get("options")
        return None

    def save_options(self, options: dict) -> None:
        self.write_json(OPTIONS, options)

    # --- model pieces -------------------------------------------------------------------------------------------
    def save_static(self, spec, cfg, tokenizer_dir) -> None:
        """space.yaml, model_config.json and a copy of the tokenizer."""
        import yaml

        self.write_text("space.yaml", yaml.safe_dump(spec.to_dict(), sort_keys=False))
        self.write_json("model_config.json", cfg.to_dict())
        dst = self.path / "tokenizer"
        if Path(tokenizer_dir).resolve() != dst.resolve():
            tmp = self.path / ".tokenizer.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(tokenizer_dir, tmp)
            shutil.rmtree(dst, ignore_errors=True)
            os.replace(tmp, dst)

    @property
    def spec(self):
        import yaml

        from .config import SpaceSpec

        path = self.path / "space.yaml"
        if not path.is_file():
            raise UserError(f"{self.kind} space.yaml not found: {path}")
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
            return SpaceSpec(**data)
        except (yaml.YAMLError, TypeError, UnicodeDecodeError) as exc:
            raise UserError(f"{path} is damaged ({type(exc).__name__})") from None

    @property
    def cfg(self):
        from .config import ModelConfig

        return ModelConfig.from_dict(self.read_json("model_config.json"))

    def save_weights(self, model, name: str) -> None:
        from safetensors.torch import save_model

        with atomic_path(self.path / name) as tmp:
            save_model(model, str(tmp))  # handles tensors shared across slots (sharing='type')

    def load_weights(self, model, name: str, matches: str) -> None:
        """Load `name` into `model` (safetensors: nothing is unpickled); damaged or mismatching files are one line."""
        from .safeio import load_weights

        load_weights(model, self.path / name, matches=matches)

    def check_data_tokenizer(self, data_path) -> None:
        """One clear line when prepared data was tokenized differently from the run (other tokens or other ids).

        A vocabulary of the same size with other ids would not fail anywhere: it would silently score (or train)
        every masked token against the wrong label."""
        ours, theirs = self.path / "tokenizer" / "tokenizer.json", Path(data_path) / "tokenizer" / "tokenizer.json"
        if not ours.is_file() or not theirs.is_file():
            return

        def essentials(path: Path) -> tuple:
            from .safeio import read_tokenizer_json

            t = read_tokenizer_json(path)
            return t.get("model"), t.get("normalizer"), t.get("pre_tokenizer")

        if essentials(ours) != essentials(theirs):
            raise UserError(f"prepared data {data_path} was tokenized with another tokenizer than {self.path} "
                            f"(different tokens or token ids); prepare it with --tokenizer {self.path / 'tokenizer'} "
                            "and pass --data")
