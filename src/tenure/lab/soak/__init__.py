"""`tenure soak`: the demo bank plus other job kinds, under a schedule of real faults."""
