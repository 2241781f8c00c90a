"""Runs studies/claims_page.py (python -m studies.claims_page) under the name that committed reports and notes cite."""
import runpy
import sys
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))   # a checkout, not installed
runpy.run_module("studies.claims_page", run_name="__main__")
