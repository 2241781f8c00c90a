"""Runs studies/design_v4.py (python -m studies.design_v4) under the name that committed suites cite."""
import runpy
import sys
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))   # a checkout, not installed
runpy.run_module("studies.design_v4", run_name="__main__")
