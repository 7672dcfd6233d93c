"""run.py's rooms that join the host side (utils/) with the container side (tools/) and the plug-in
registry: the start-up checks of the cases (``checks.py``), host.yaml with the command line
(``run_config.py``) and the dispatch to a running server's benchmark (``endpoint.py``). utils/ may
not import tools/ (tests/test_lifecycle_units.py), so these live here, above both, as run.py does."""
