"""Determined's launcher modules, run by det_sdk's (``det_sdk.launch``)."""
