"""Plotly pages drawn from the frames the compare layer returns."""
