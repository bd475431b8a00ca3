"""Callbacks for the loops people train with: `campaign.integrations.hf.CampaignCallback` for the HF Trainer (and
TRL's trainers, which inherit its callbacks). Import the submodule you use: each imports its framework."""
