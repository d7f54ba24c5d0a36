"""Experiments over many problems: the sweep's grid of cells (:mod:`~fusionopt.experiments.grid`), its results file
(:mod:`~fusionopt.experiments.records`) and the runner that solves the cells in parallel and resumes (:mod:`~fusionopt.experiments.runner`).
:mod:`fusionopt.sweep` is their public face."""
