"""Fleet scale: a store of run bundles and their derived tables (Parquet), and the fleet
analysis of many bundles on Dask (the [fleet] extra: pip install 'gmpanalysis[fleet]')."""

from .compute import fleet, fleet_periods, read_summary
from .report import df_fleet_workloads, to_fleet_report
from .store import bundle_key, bundle_parts, list_bundles, put_bundle

__all__ = [
    "bundle_key",
    "bundle_parts",
    "df_fleet_workloads",
    "fleet",
    "fleet_periods",
    "list_bundles",
    "put_bundle",
    "read_summary",
    "to_fleet_report",
]
