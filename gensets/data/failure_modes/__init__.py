"""Wiles et al. (2022)'s published failure rates (published.json)."""
