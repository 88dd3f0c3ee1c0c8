"""Register with transformers' Auto* factories when they load, without importing transformers (or torch) first.

`import nni_lvbert` calls `install()`. The Auto factories live in two modules, `configuration_auto` (AutoConfig)
and `modeling_auto` (AutoModel...); transformers imports them lazily, on first use. Registering eagerly would cost
every `lvbert` command the import of transformers and torch (`lvbert --help` takes 0.05 s without them), and
registering when the `transformers` package itself is imported would still cost the ~3 s import of
`modeling_utils` in processes that only tokenize. So:

- whatever of the two is loaded already is registered at once;
- otherwise a `sys.meta_path` finder wraps the loader of each of them (and of this package's own
  `configuration_lvbert` / `modeling_lvbert`) and, right after one finishes executing, registers what can be
  registered: the config once `configuration_auto` is loaded, the models once `modeling_auto` is. The finder
  removes itself when both are done.

When one of this package's HF modules is still being imported (it imported transformers, which loaded an Auto
module), registering has to wait for it; the finder sees it finish and registers then. A failure to register
is a warning, never an error in the user's own import.
"""
from __future__ import annotations

import sys

CONFIG_AUTO = "transformers.models.auto.configuration_auto"
MODELING_AUTO = "transformers.models.auto.modeling_auto"
OURS = ("nni_lvbert.hf.configuration_lvbert", "nni_lvbert.hf.modeling_lvbert")
WATCHED = frozenset((CONFIG_AUTO, MODELING_AUTO, *OURS))


def _loaded(name: str, finished: str | None) -> bool:
    """`name` is imported completely (`finished` is the module whose execution just ended)."""
    module = sys.modules.get(name)
    if module is None:
        return False
    return name == finished or not getattr(getattr(module, "__spec__", None), "_initializing", False)


def sync(finished: str | None = None) -> bool:
    """Register whatever the loaded Auto modules allow; True once everything is registered."""
    from .auto import register, registered

    if any(name in sys.modules and not _loaded(name, finished) for name in OURS):
        return False  # one of our modules is mid-import; the hook calls again when it is done
    try:
        if _loaded(MODELING_AUTO, finished):
            register(models=True)
        elif _loaded(CONFIG_AUTO, finished):
            register(models=False)
    except Exception as exc:  # noqa: BLE001  (never break the import that triggered this)
        import warnings

        warnings.warn(f"nni_lvbert could not register its models with transformers: {exc}", stacklevel=2)
        return True
    return registered()["models"]


class _RegisterAfterExec:
    """Loader wrapper: runs the real loader, puts it back on the module, then calls sync()."""

    def __init__(self, loader, hook):
        self.loader, self.hook = loader, hook

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        try:
            self.loader.exec_module(module)
        finally:
            module.__loader__ = self.loader
            if getattr(module, "__spec__", None) is not None:
                module.__spec__.loader = self.loader
        if sync(finished=module.__name__):
            self.hook.remove()

    def __getattr__(self, name):  # get_source, get_resource_reader, ... of the real loader
        return getattr(self.loader, name)


class TransformersAutoHook:
    """`sys.meta_path` finder for the WATCHED modules; finds their spec with the other finders, wraps the loader."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in WATCHED:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _RegisterAfterExec(spec.loader, self)
                return spec
        return None

    def remove(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)


def install() -> None:
    """Register now what is loaded; watch for the rest (once per process)."""
    if sync() or any(isinstance(f, TransformersAutoHook) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, TransformersAutoHook())
