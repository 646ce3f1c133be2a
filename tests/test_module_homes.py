"""The names every layer shares each have one home module, and no Python file outside the tests
grows past what a reader takes in: a name imported through a module that only imports it too
makes that module a second home, which the next move of the name breaks."""

from __future__ import annotations

import ast

from repository import ROOT

#: Each shared name's one home.
HOMES = {
    "benchmarks.infra.errors": {"ConfigError", "Preempted", "suggest", "resolve_name"},
    "benchmarks.infra.paths": {"NAME_PART", "MAX_NAME", "STAGING_SUFFIXES", "check_name",
                               "inside", "refuse_link"},
    "benchmarks.run.spec": {"RunSpec", "SuiteSettings"},
    "benchmarks.infra.statistics": {"mean_std", "format_mean_std"},
    "benchmarks.run.trainer": {"build_trainer", "experiment_trainer"},
}
HOME_OF = {name: module for module, names in HOMES.items() for name in names}
SCANNED = ("benchmarks", "tune", "modules", "datamodules", "tests")
#: Every Python file outside the tests: the packages the project installs (pyproject.toml's
#: ``packages.find``) and any script at the repository's root.
SOURCES = ("benchmarks", "tune", "modules", "datamodules")
#: The most lines one of them may hold, each layer alike: a longer file is split where its code
#: already has seams (pipelines, sections, rendering), into modules beside it.
MAX_LINES = 500


def second_homes(source: str, module: str) -> list[str]:
    """Where ``source`` (the text of ``module``) takes a shared name from a module other than
    its home, or lists one in ``__all__`` without being its home."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            found += [f"{module}:{node.lineno} imports {a.name} from {node.module}"
                      for a in node.names
                      if a.name in HOME_OF and node.module != HOME_OF[a.name]]
        elif (isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
              and isinstance(node.value, (ast.List, ast.Tuple))):
            found += [f"{module}:{node.lineno} lists {e.value} in __all__"
                      for e in node.value.elts
                      if isinstance(e, ast.Constant) and HOME_OF.get(e.value, module) != module]
    return found


def module_name(path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def test_each_shared_name_is_defined_in_its_home() -> None:
    for module, names in HOMES.items():
        tree = ast.parse((ROOT / (module.replace(".", "/") + ".py")).read_text(encoding="utf-8"))
        defined = {n.name for n in tree.body
                   if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
        defined |= {t.id for n in tree.body if isinstance(n, ast.Assign)
                    for t in n.targets if isinstance(t, ast.Name)}
        assert names <= defined, f"{module} does not define {sorted(names - defined)}"


def test_each_shared_name_is_imported_from_its_home_only() -> None:
    found = []
    for directory in SCANNED:
        for path in sorted((ROOT / directory).rglob("*.py")):
            found += second_homes(path.read_text(encoding="utf-8"), module_name(path))
    assert found == []


def test_the_scan_catches_an_import_through_another_module_and_a_re_export() -> None:
    source = ("from benchmarks.run.spec import ConfigError, check_keys\n"
              "def f():\n    from benchmarks.suites.config import RunSpec, load_suite\n"
              "from benchmarks.infra.paths import inside\n"
              "__all__ = ['ConfigError', 'inside', 'load_suite']\n")
    assert sorted(second_homes(source, "benchmarks.run")) == [
        "benchmarks.run:1 imports ConfigError from benchmarks.run.spec",
        "benchmarks.run:3 imports RunSpec from benchmarks.suites.config",
        "benchmarks.run:5 lists ConfigError in __all__",
        "benchmarks.run:5 lists inside in __all__",
    ]
    # a home lists its own names
    assert "benchmarks.infra.paths:5 lists inside in __all__" not in second_homes(
        source, "benchmarks.infra.paths")


def source_files() -> list:
    """Every Python file outside the tests (:data:`SOURCES` and the root's scripts)."""
    return sorted([*ROOT.glob("*.py"),
                   *(path for directory in SOURCES for path in (ROOT / directory).rglob("*.py"))])


def test_no_python_file_outside_the_tests_is_over_500_lines() -> None:
    long = [f"{path.relative_to(ROOT)}: {n} lines" for path in source_files()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES]
    assert long == []


def test_the_line_limit_reads_every_package_the_project_installs() -> None:
    """A package added to pyproject.toml's ``packages.find`` is held to the limit too."""
    import re

    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    include = re.search(r"^\[tool\.setuptools\.packages\.find\]\ninclude = \[(.*)\]$", pyproject,
                        re.MULTILINE)
    assert include is not None, "pyproject.toml's [tool.setuptools.packages.find] include"
    installed = {name.strip().strip('"').rstrip("*") for name in include[1].split(",")}
    assert installed == set(SOURCES)
