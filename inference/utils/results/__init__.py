"""The host's results: the merged summary, cross-host aggregates, the HTML report and run comparison."""
