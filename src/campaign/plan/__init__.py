"""Planning a campaign before paying for it: prices of rentals, phases on a schedule, the budget per package
(campaign budget), ablation designs and their analysis (campaign ablate)."""
from .budget import BudgetReport, budget, read_plan
from .prices import PriceFile, load_prices

__all__ = ["BudgetReport", "PriceFile", "budget", "load_prices", "read_plan"]
