"""`lvbert init-experiment DIR`: copy the shipped nnictl experiment folder and search spaces out, to read and edit.

DIR gets the nnictl configs (search.yml, supernet.yml, iot.yml), their search-space JSONs, the web-UI bind script
and tuner_meta.yml (the Algorithm-1 tuner's entry for `nnictl algo register --meta`) side by side (the configs
name them relative to their own folder, so the copy works as is), and DIR/search_spaces/<name>.yaml, the search
spaces, for `--space DIR/search_spaces/<name>.yaml`. Existing files are never replaced without `--overwrite`;
each file is written to a temp file and renamed.

With `--supernet RUN` (a finished supernet run directory) the copies of search.yml and iot.yml name RUN's absolute
path in their trial command instead of `$LVBERT_SUPERNET` / the default, and search_space.json is RUN's own space, so
`nnictl create --config DIR/search.yml` needs no environment, and `lvbert search export --experiment ID` finds the supernet in the experiment's config.
"""
from __future__ import annotations

from pathlib import Path

from . import resources
from .atomic import copy_file, write_json, write_text
from .errors import UserError

# the supernet argument of the shipped search.yml and iot.yml trial commands (tests check both carry it)
SUPERNET_SLOT = '"${LVBERT_SUPERNET:-../runs/quickstart/supernet}"'
WITH_SUPERNET = ("search.yml", "iot.yml")
SEARCH_SPACE_JSON = "search_space.json"  # search.yml's searchSpaceFile: with --supernet, that supernet's space


def planned_copies(dest: Path) -> list[tuple[Path, Path]]:
    """(shipped file, its copy under dest) for every file init-experiment writes."""
    pairs = [(src, dest / src.name) for src in resources.EXPERIMENT_FILES]
    pairs += [(src, dest / "search_spaces" / src.name) for src in resources.space_files()]
    return pairs


def init_experiment(dest: str | Path, overwrite: bool = False, supernet: str | Path | None = None) -> list[Path]:
    """Copy the experiment folder and the space YAMLs into dest (with `supernet`'s absolute path written into the
    configs that read one); the written paths."""
    dest = Path(dest)
    if supernet is not None:
        from .supernet.rundir import supernet_dir

        run = supernet_dir(supernet)  # not a finished supernet run -> one line
        supernet = run.path.resolve()
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
            if supernet is not None and src.name in WITH_SUPERNET:
                write_text(dst, with_supernet(src.read_text(encoding="utf-8"), supernet))
            elif supernet is not None and src.name == SEARCH_SPACE_JSON:  # the supernet's own space (any slots)
                from .search.nnictl import space_json

                write_json(dst, space_json(run.spec))
            else:
                copy_file(src, dst)
    except OSError as exc:
        raise UserError(f"cannot write into {dest}: {exc.strerror or exc}") from None
    return [dst for _, dst in pairs]


def with_supernet(config_text: str, supernet: Path) -> str:
    """A shipped config's text with the supernet's path in place of $LVBERT_SUPERNET / the default."""
    import shlex

    if SUPERNET_SLOT not in config_text:
        raise UserError(f"the shipped config has no {SUPERNET_SLOT} to replace (package damaged?)")
    return config_text.replace(SUPERNET_SLOT, shlex.quote(str(supernet)))


def register(sub) -> None:
    from .cliargs import add_json_arg

    p = sub.add_parser("init-experiment",
                       help="copy the nnictl experiment configs and search spaces into DIR to edit them")
    p.add_argument("dir", metavar="DIR", help="folder to write (created if missing)")
    p.add_argument("--supernet", default=None, metavar="RUN",
                   help="a trained supernet run directory: written into search.yml and iot.yml, so plain "
                        "`nnictl create --config DIR/search.yml` scores on it (default: the configs read "
                        "$LVBERT_SUPERNET, else ../runs/quickstart/supernet relative to DIR)")
    p.add_argument("--overwrite", action="store_true", help="replace files DIR already has")
    add_json_arg(p)
    p.set_defaults(func=run)


def run(args) -> dict:
    from .layout import SUPERNET

    written = init_experiment(args.dir, overwrite=args.overwrite, supernet=args.supernet)
    d = Path(args.dir)
    supernet = args.supernet or SUPERNET
    by_hand = f"nnictl create --config {d / 'search.yml'} --port 8080"
    if not args.supernet:  # the configs read $LVBERT_SUPERNET, else ../runs/quickstart/supernet relative to DIR
        by_hand = f"LVBERT_SUPERNET={Path(supernet).resolve()} {by_hand}"
    return {
        "wrote": [str(p.relative_to(d)) for p in written],
        "supernet": str(Path(args.supernet).resolve()) if args.supernet else None,
        "search_with_nnictl": f"lvbert search nnictl --supernet {supernet} --experiment-config {d / 'search.yml'}",
        "or_by_hand": by_hand,
        "web_ui_on_localhost_only": f"NODE_OPTIONS=\"--require {(d / 'bind_localhost.js').resolve()}\" {by_hand}",
        "register_tuner": f"nnictl algo register --meta {d / 'tuner_meta.yml'}",
        "edited_space": f"lvbert supernet train --space {d / 'search_spaces' / 'lvbert.yaml'} ...",
        "model_sizes": str(resources.SIZES_FILE),
    }
