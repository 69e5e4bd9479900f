"""olmoablate: matched baseline/variant ablations of OLMo 3 architectures.

Data flows one way: spec (YAML) -> plan (plan.json) -> launch (local / Slurm via submitit)
-> train (OLMo-core Trainer) -> report (matched-token comparison + decision gate).
Importing this package must stay cheap: no torch, pandas or matplotlib at import time.
"""

__version__ = "0.1.0"
