"""Experiments over many problems: the sweep's grid of cells (:mod:`.grid`), its results file
(:mod:`.records`) and the runner that solves the cells in parallel and resumes (:mod:`.runner`).
:mod:`fusionopt.sweep` is their public face."""
