"""Sphinx configuration of rbdata's documentation site.

Build with ``bash scripts/docs.sh`` (or ``make docs``): it runs the code of the
pages (``-b doctest``), then builds the HTML (``-b html``), both with warnings
as errors. Markdown pages are read by myst-parser; the API reference comes from
the package's Google-style docstrings (autodoc + napoleon).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from sphinx.pycode import ModuleAnalyzer
from sphinx.util import logging

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))  # document this checkout's rbdata, not an installed copy

import rbdata  # noqa: E402

logger = logging.getLogger(__name__)

project = "rbdata"
author = "rbdata contributors"
copyright = "rbdata contributors"  # noqa: A001 - Sphinx's name
release = version = rbdata.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.doctest",
    "sphinx.ext.intersphinx",
    "sphinx.ext.viewcode",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "_generated", ".gitignore"]  # _generated: included by pages

# Links to the projects rbdata builds on. The build runs offline, so each project's
# inventory is a small file in docs/_inventories (written by make_inventories.py there,
# which lists the names it links) instead of the project's objects.inv on the web.
INVENTORIES = DOCS / "_inventories"
intersphinx_mapping = {
    "torch": ("https://docs.pytorch.org/docs/stable/", str(INVENTORIES / "torch.inv")),
    "tensordict": (
        "https://docs.pytorch.org/tensordict/stable/",
        str(INVENTORIES / "tensordict.inv"),
    ),
    "lightning": ("https://lightning.ai/docs/pytorch/stable/", str(INVENTORIES / "lightning.inv")),
    "torchdata": ("https://meta-pytorch.org/data/main/", str(INVENTORIES / "torchdata.inv")),
    "ray": ("https://docs.ray.io/en/latest/", str(INVENTORIES / "ray.inv")),
}
intersphinx_timeout = 1  # never wait for the network (the inventories are local files)

# Markdown
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3  # `[text](page.md#a-heading)` links

# API reference
autodoc_member_order = "bysource"
autodoc_typehints = "description"  # signatures stay short; types go into the parameter list
autodoc_typehints_description_target = "all"  # every parameter and return type
# defaults as written in the source (``LazyTensorStorage(1000)``, ``("next", "done")``)
autodoc_preserve_defaults = True
autodoc_inherit_docstrings = True
napoleon_google_docstring = True
napoleon_numpy_docstring = False
# "Keyword Args" read as "Args": keyword-only parameters get their types from the hints too
# (the signature's ``*`` shows which are keyword-only)
napoleon_custom_sections = [("Keyword Args", "Args")]
napoleon_use_rtype = False
napoleon_attr_annotations = True

# Only the pages' own {doctest}/{testcode} blocks run in `-b doctest`: the docstring
# examples the API reference shows already run in the test suite (pytest --doctest-modules).
doctest_test_doctest_blocks = ""
# Keep the build log readable: Lightning's banners and known deprecation notices of the
# pinned dependencies say nothing about the examples.
doctest_global_setup = """
import logging
import warnings

logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
warnings.filterwarnings("ignore", category=DeprecationWarning)
warnings.filterwarnings("ignore", message=".*set_vital.*")
warnings.filterwarnings("ignore", message=".*LeafSpec.*is deprecated.*")
warnings.filterwarnings("ignore", message=".*exists and is not empty.*")
"""

# HTML
html_theme = "furo"
html_title = f"rbdata {release}"
html_static_path = ["_static"]
html_css_files = ["rbdata.css"]
html_theme_options = {"navigation_with_keys": True}
pygments_style = "friendly"
pygments_dark_style = "monokai"

# --------------------------------------------------------------------------- benchmark plot
BENCH_JSON = DOCS / "_data" / "bench-run.json"  # written by benchmarks/run.py --json OUT
GENERATED = DOCS / "_generated"


def _load_benchmark(name: str) -> Any:
    """Import ``benchmarks/<name>.py`` (the benchmarks are scripts, not a package)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location(
            f"_rbdata_bench_{name}", ROOT / "benchmarks" / f"{name}.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return module


def _benchmark_table(run: dict[str, Any], rows: dict[str, Any]) -> str:
    """The run's rows as a Markdown table: throughput, the plain-torch limit, torchrl."""
    units = {row["unit"] for row in run["rows"].values() if "unit" in row}
    unit = f" ({units.pop()})" if len(units) == 1 else ""
    lines = [
        f"| row | what | rbdata{unit} | limit{unit} | rbdata / limit "
        f"| torchrl{unit} | torchrl / limit | packed{unit} | rbdata / packed |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, row in run["rows"].items():
        what = (rows[name].__doc__ or "").strip().splitlines()[0] if name in rows else ""
        if "error" in row:
            lines.append(f"| `{name}` | {what} | {row['error']} | | | | | | |")
            continue
        theirs = run.get("torchrl", {}).get(name, {}).get("lib")
        limit, packed = row.get("limit"), row.get("packed")
        cells = [
            f"{row['lib']:,.0f}" + ("" if unit else f" {row['unit']}"),
            f"{limit:,.0f}" if limit else "-",
            f"{row['lib'] / limit:.2f}" if limit else "-",
            f"{theirs:,.0f}" if theirs else "-",
            f"{theirs / limit:.2f}" if theirs and limit else "-",
            f"{packed:,.0f}" if packed else "-",
            f"{row['lib'] / packed:.2f}" if packed else "-",
        ]
        lines.append(f"| `{name}` | {what} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _generate_benchmark_page_parts(app: Any) -> None:
    """Draw the committed run with ``benchmarks/plot.py`` and tabulate it (the page embeds both)."""
    run = json.loads(BENCH_JSON.read_text())
    GENERATED.mkdir(exist_ok=True)
    _load_benchmark("plot").plot(
        run,
        GENERATED / "benchmark-ratios.png",
        title="rbdata and torchrl: buffer throughput and training-loop speed",
    )
    table = _benchmark_table(run, _load_benchmark("run").ROWS)
    (GENERATED / "benchmark-table.md").write_text(table)


# --------------------------------------------------------------------------- cross-references
def _resolve_public_alias(app: Any, env: Any, node: Any, contnode: Any) -> Any:
    """Resolve ``rbdata.<package>.<Name>`` to ``rbdata.<Name>`` where the API documents it.

    Docstrings name objects by where they are defined (``rbdata.loader.ReplayDataset``,
    ``rbdata.transforms.PolicyAgeFilter``); the reference documents the public names of
    ``rbdata.__all__`` as ``rbdata.<Name>``, which is how they are imported.
    """
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    name = target.rsplit(".", 1)[-1]
    if not target.startswith("rbdata.") or name not in rbdata.__all__:
        return None
    alias = f"rbdata.{name}"
    if alias == target:
        return None
    domain = env.get_domain("py")
    return domain.resolve_xref(
        env, node["refdoc"], app.builder, node["reftype"], alias, node, contnode
    )


def _attribute_docstring(
    app: Any, what: str, name: str, obj: Any, options: Any, lines: list
) -> None:
    """Give a public module attribute (``rbdata.traj``) the docstring written beside its definition.

    autodoc looks for an attribute's docstring in the module it documents it from
    (``rbdata``), not where it is defined, and would show its class's docstring instead.
    """
    if what != "data" or not name.startswith("rbdata."):
        return
    module = getattr(type(obj), "__module__", "")
    docs = ModuleAnalyzer.for_module(module).find_attr_docs() if module.startswith("rbdata") else {}
    written = docs.get(("", name.rsplit(".", 1)[-1]))
    if written:
        lines[:] = list(written)


def _sentence_as_written(
    app: Any, what: str, name: str, obj: Any, options: Any, lines: list
) -> None:
    """Undo napoleon's reading of a property docstring's first clause as its type.

    Google style lets a property docstring start with ``type: description``; napoleon then
    splits the first line at its first colon. rbdata's properties start with a sentence
    (``Always True: a list needs no allocation.``), whose first clause is no type: put it back.
    """
    if what not in {"property", "attribute"}:
        return
    for i, line in enumerate(lines):
        if line.startswith(":type: "):
            clause = line[len(":type: ") :]
            if any(" " in part.strip() for part in clause.replace(",", "|").split("|")):
                del lines[i]
                first = next(j for j, text in enumerate(lines) if text.strip())
                lines[first] = f"{clause}: {lines[first]}"
            return


def _protocol_without_signature(
    app: Any, what: str, name: str, obj: Any, options: Any, signature: Any, return_annotation: Any
) -> tuple[str, Any] | None:
    """Show a Protocol (``ServableBuffer``) without the ``(*args, **kwargs)`` of its signature."""
    if what == "class" and getattr(obj, "_is_protocol", False):
        return "", return_annotation
    return None


def _check_api_coverage(app: Any, env: Any) -> None:
    """Warn (an error under ``-W``) for a name of ``rbdata.__all__`` the API reference lacks."""
    documented = set(env.get_domain("py").objects)
    missing = sorted(n for n in rbdata.__all__ if f"rbdata.{n}" not in documented)
    if missing:
        logger.warning("the API reference does not document rbdata.%s", ", rbdata.".join(missing))


class _Anchors(HTMLParser):
    """The ids a page defines and the links it makes."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("id", "name") and value:
                self.ids.add(value)
            elif name == "href" and tag == "a" and value:
                self.links.append(value)


def _check_internal_links(app: Any, exception: BaseException | None) -> None:
    """Warn (an error under ``-W``) for a link inside the site to a missing page or anchor."""
    if exception is not None or app.builder.format != "html":
        return
    out = Path(app.outdir)
    pages: dict[Path, _Anchors] = {}
    for page in out.rglob("*.html"):
        if "_static" in page.parts or "_sources" in page.parts:
            continue
        parser = _Anchors()
        parser.feed(page.read_text(encoding="utf-8"))
        pages[page.resolve()] = parser
    for page, parsed in sorted(pages.items()):
        for link in parsed.links:
            target = urlsplit(link)
            if target.scheme or target.netloc or link.startswith(("mailto:", "javascript:")):
                continue  # leaves the site
            path = (page.parent / unquote(target.path)).resolve() if target.path else page
            if path.suffix != ".html":
                if not path.exists():
                    logger.warning("%s: dead link %r (no such file)", page.relative_to(out), link)
                continue
            if path not in pages:
                logger.warning("%s: dead link %r (no such page)", page.relative_to(out), link)
            elif target.fragment and unquote(target.fragment) not in pages[path].ids:
                logger.warning("%s: dead anchor %r", page.relative_to(out), link)


def setup(app: Any) -> dict[str, Any]:
    app.connect("builder-inited", _generate_benchmark_page_parts)
    app.connect("missing-reference", _resolve_public_alias)
    app.connect("autodoc-process-docstring", _attribute_docstring)
    app.connect("autodoc-process-docstring", _sentence_as_written, priority=600)  # after napoleon
    app.connect("autodoc-process-signature", _protocol_without_signature)
    app.connect("env-check-consistency", _check_api_coverage)
    app.connect("build-finished", _check_internal_links)
    return {"parallel_read_safe": True}
