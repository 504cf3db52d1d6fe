"""Quality tooling: the mutation score of the default test command and the long fuzz run."""
