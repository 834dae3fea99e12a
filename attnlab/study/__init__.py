"""Studies: a grid of configurations × seeds, each an ordinary run directory, and a table of
means with confidence intervals over seeds and significance against a baseline cell.

- ``metrics``: the metrics a study tabulates, their direction and range (one table);
- ``literals``: a TOML table's array items as written (cells are named ``3e-4``);
- ``tune``: the ``[tune]`` table and the choice of each cell's setting from dev scores;
- ``spec``: the study file (TOML) and its checks;
- ``task``: one run, start to score, in child processes (the unit every executor runs);
- ``score``: scoring a run's checkpoint into ``RUN/study-score.json``;
- ``lock``: one runner per study directory (``.study-lock``);
- ``outcomes``: ``outcomes.json``, each run's latest outcome;
- ``runner``: the local and Dask executors, tuning then the study's runs, ``study.json``;
- ``table``: the table from the score files (``attnlab.stats`` for intervals and tests);
- ``render``: the table as text rows and Markdown;
- ``curves``: dev curves per cell, mean and band over seeds (the lab's study view).
"""
