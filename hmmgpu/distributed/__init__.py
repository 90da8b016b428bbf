"""Searches spread over worker processes (and later GPUs and clusters), merged exactly."""
