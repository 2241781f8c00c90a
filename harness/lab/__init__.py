"""Estimator lab: exact bias and second moment of the estimators on enumerable synthetic policies."""
