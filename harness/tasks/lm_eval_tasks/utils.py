"""Functions the task YAMLs here name with ``!function utils.<name>`` (lm-eval loads this file by path).

They live in :mod:`harness.tasks.lm_eval_adapters`; this file only names one ``process_docs`` per benchmark.
"""
from harness.tasks.lm_eval_adapters import make_process_docs, process_results, process_results_exact

__all__ = ["process_docs_aime24", "process_docs_amc23", "process_docs_gsm8k", "process_docs_math500",
           "process_docs_minerva", "process_docs_olympiadbench", "process_results", "process_results_exact"]

process_docs_gsm8k = make_process_docs("gsm8k")
process_docs_math500 = make_process_docs("math500")
process_docs_aime24 = make_process_docs("aime24")
process_docs_amc23 = make_process_docs("amc23")
process_docs_minerva = make_process_docs("minerva")
process_docs_olympiadbench = make_process_docs("olympiadbench")
