"""The run layer: build, train, evaluate and write one configuration; it reads no suite file.

Each name is imported from its own module (``benchmarks.run.one``, ``.trainer``, ``.cache``, ...):
the package itself imports nothing, so that what needs only a light module (the address check,
a Ray task's start marker) does not load torch and Lightning with it."""
