"""`lvbert init-experiment DIR`: copy the shipped nnictl experiment folder and search spaces out, to read and edit.

DIR gets the nnictl configs (search.yml, supernet.yml, iot.yml), their search-space JSONs and the web-UI bind
script side by side (the configs name them relative to their own folder, so the copy works as is), and
DIR/search_spaces/<name>.yaml, the search spaces, for `--space DIR/search_spaces/<name>.yaml`. Existing files are
never replaced without `--overwrite`; each file is written to a temp file and renamed.
"""
from __future__ import annotations

from pathlib import Path

from . import resources
from .atomic import copy_file
from .errors import UserError


def planned_copies(dest: Path) -> list[tuple[Path, Path]]:
    """(shipped file, its copy under dest) for every file init-experiment writes."""
    pairs = [(src, dest / src.name) for src in resources.EXPERIMENT_FILES]
    pairs += [(src, dest / "search_spaces" / src.name) for src in resources.space_files()]
    return pairs


def init_experiment(dest: str | Path, overwrite: bool = False) -> list[Path]:
    """Copy the experiment folder and the space YAMLs into dest; the written paths."""
    dest = Path(dest)
    if dest.exists() and not dest.is_dir():
        raise UserError(f"{dest} exists and is not a directory")
    pairs = planned_copies(dest)
    in_the_way = [dst for _, dst in pairs if dst.is_dir()]
    if in_the_way:
        raise UserError(f"{in_the_way[0]} is a directory; init-experiment writes a file there")
    existing = [str(dst.relative_to(dest)) for _, dst in pairs if dst.exists() or dst.is_symlink()]
    if existing and not overwrite:
        named = ", ".join(existing[:3]) + (f" and {len(existing) - 3} more" if len(existing) > 3 else "")
        raise UserError(f"{dest} already has {named}; pass --overwrite to replace them")
    try:
        for src, dst in pairs:
            copy_file(src, dst)
    except OSError as exc:
        raise UserError(f"cannot write into {dest}: {exc.strerror or exc}") from None
    return [dst for _, dst in pairs]


def register(sub) -> None:
    from .cliargs import add_json_arg

    p = sub.add_parser("init-experiment",
                       help="copy the nnictl experiment configs and search spaces into DIR to edit them")
    p.add_argument("dir", metavar="DIR", help="folder to write (created if missing)")
    p.add_argument("--overwrite", action="store_true", help="replace files DIR already has")
    add_json_arg(p)
    p.set_defaults(func=run)


def run(args) -> dict:
    written = init_experiment(args.dir, overwrite=args.overwrite)
    d = Path(args.dir)
    return {
        "wrote": [str(p.relative_to(d)) for p in written],
        "search_with_nnictl": f"lvbert search nnictl --supernet runs/supernet --config {d / 'search.yml'}",
        "or_by_hand": f"LVBERT_SUPERNET=$PWD/runs/supernet NODE_OPTIONS=\"--require "
                      f"{(d / 'bind_localhost.js').resolve()}\" nnictl create --config {d / 'search.yml'} --port 8080",
        "edited_space": f"lvbert supernet train --space {d / 'search_spaces' / 'lvbert.yaml'} ...",
        "model_sizes": str(resources.SIZES_FILE),
    }
