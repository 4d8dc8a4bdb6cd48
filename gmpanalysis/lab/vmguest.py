"""The lab's side inside the VM (run by the guest's init through guest.sh): one lab run as
the job says, its outcome as JSON in the state directory beside the job."""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

from ..errors import GmpError
from .run import LabConfig, run_lab


def main(job_path: str) -> int:
    result_path = Path(job_path).with_name("result.json")

    def progress(msg: str) -> None:
        print(msg, flush=True)

    try:
        job = json.loads(Path(job_path).read_text())
        cfg = LabConfig(**job["config"])
        bins = {k: Path(v) for k, v in job["bins"].items()}
        run_lab(cfg, job["out"], progress=progress, bins=bins, host_facts=job.get("host_facts"))
        result = {"ok": True}
    except GmpError as e:
        result = {"ok": False, "error": str(e)}
    except BaseException as e:  # noqa: BLE001 - the host must learn of any failure, not a silent VM
        result = {"ok": False, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-4000:]}
        print(result["traceback"], flush=True)
    result_path.write_text(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
