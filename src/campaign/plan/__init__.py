"""Planning a campaign before paying for it: prices of rentals, phases on a schedule, the budget per package
(campaign budget), ablation designs and their analysis (campaign ablate), cost at equal quality (campaign bench)."""
from .ablate import AblationPlan, plan_ablation, read_factors
from .bench import BenchReport, bench
from .budget import BudgetReport, budget, read_plan
from .effects import AblationAnalysis, analyze_ablation
from .prices import PriceFile, load_prices

__all__ = ["AblationAnalysis", "AblationPlan", "BenchReport", "BudgetReport", "PriceFile", "analyze_ablation", "bench",
           "budget", "load_prices", "plan_ablation", "read_factors", "read_plan"]
