"""The operator's faces: the CLI, the dashboard, the metrics exporter, the demo, and the views
the CLI and the dashboard share."""
