"""The built-in task suite: small self-contained repositories with one injected bug per task."""
