"""What a run measured: k6 results, server metrics, resources, the live series, the checks on its figures."""
