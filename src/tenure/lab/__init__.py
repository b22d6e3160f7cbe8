"""The lab: `tenure bench` and `tenure soak`. The library never imports it."""
