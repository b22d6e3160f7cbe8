"""No models: this module exists because Django sends `post_migrate` only to apps that have
one, and Tenure's migrations run on that signal (see `migrations_hook`)."""
