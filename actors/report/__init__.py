"""What a run writes and shows: the console (`console`, `console_watch`), the run directory
(`run_dir`, `loggers`, `metrics_export`, `plots`), redaction of secrets (`redact`), and the tables
of a stage and of injected faults (`stage_summary`, `significance`, `fault_report`).

May import: nothing else of `actors` (every role reports through it; tests/test_layers.py holds
this), `configs`.
"""
