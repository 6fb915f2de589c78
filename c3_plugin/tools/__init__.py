"""The ``c3`` command line and what it runs: compare, dashboard, diagnose, audit, plan-budget, advise."""
