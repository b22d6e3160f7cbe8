"""Integrations with web frameworks: `tenure.contrib.django` and `tenure.contrib.asgi`.

Each needs its framework installed (the `tenure[django]` and `tenure[fastapi]` extras); the core
package imports neither.
"""
