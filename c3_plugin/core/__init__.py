"""The pure core: workflows and their trace, plans, credit, the loss, rewards, structured generation, the
generation protocol, the run config and the domain contract. No model is loaded here."""
