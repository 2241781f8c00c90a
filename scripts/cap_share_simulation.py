"""Runs studies/cap_share_simulation.py (python -m studies.cap_share_simulation) under the name that committed notes cite."""
import runpy
import sys
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))   # a checkout, not installed
runpy.run_module("studies.cap_share_simulation", run_name="__main__")
