"""``augself-selfcheck``: whether augself-tf works, and runs fast, on this machine (environment, correctness,
placement, speed), one verdict line per check and a JSON file to share. Nothing in the library imports it."""
