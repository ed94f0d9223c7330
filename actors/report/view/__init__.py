"""`swerve view RUN_DIR`: what the agent did, as one web page that works offline and can be copied
anywhere. Steps as timelines of their trajectories, a trajectory's conversation with each generated
token coloured by the policy version that produced it and marked where the update masked it, the
attempt's change as a diff and the grader's verdict, a group's members side by side, and each eval
task's attempts across the pipeline's stages.

- `run_data`: reads a run directory (a pipeline's, a training run's or an eval's) into the page's data.
- `tokens`: a trajectory's generated tokens as text pieces, with the run's tokenizer, secrets blanked.
- `page`: writes the page (the data embedded in chunks parsed when first opened) and serves it on loopback.

May import: the rest of `actors.report` (redaction, the run directory's readers), `policies.tokenizer`.
"""
