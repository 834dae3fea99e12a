"""Studies: a grid of configurations × seeds, each an ordinary run directory, and a table of
means with confidence intervals over seeds and significance against a baseline cell.

- ``spec``: the study file (TOML) and its checks;
- ``task``: one run, start to score, in child processes (the unit every executor runs);
- ``score``: scoring a run's checkpoint into ``RUN/study-score.json``;
- ``runner``: the local and Dask executors, ``study.json`` and ``outcomes.json``;
- ``table``: the table from the score files (``attnlab.stats`` for intervals and tests);
- ``render``: the table as text rows and Markdown;
- ``curves``: dev curves per cell, mean and band over seeds (the lab's study view).
"""
