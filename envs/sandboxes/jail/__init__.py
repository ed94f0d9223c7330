"""Code that also runs inside a sandbox's jail: the standard library only, no swerve import.

The jail sees this directory read-only and nothing else of the project, so every module here
stands alone (imports between them are by plain module name, with this directory on sys.path).
"""
