"""What the operator's faces (the CLI and the dashboard) both show: read models and their
wording, so a figure reads the same in a terminal and in a browser."""
