"""The GPU's clocks, power and temperature while bench/gpu_check.py runs: nvidia-smi sampled every
250 ms into OUTDIR/clocks.csv, summed up per part (median and lowest SM clock, median and
highest power, highest temperature, the clock event reasons seen). A pass's rate depends on what
ran before it (docs/attention.md, "The passes timed apart"): these say whether the clocks moved.
"""
import os
import statistics
import subprocess
import threading
import time

# nvidia-smi's names for the active clock event reasons: clocks_event_reasons (drivers of 2023
# on), clocks_throttle_reasons before; neither on some, and then the reasons are left out
FIELDS = "clocks.sm,clocks.mem,power.draw,temperature.gpu"
REASONS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")
# the reasons' bits (nvml's nvmlClocksEventReason*), named in the summary
REASON_BITS = {0x1: "idle", 0x2: "app clocks", 0x4: "SW power cap", 0x8: "HW slowdown",
               0x10: "sync boost", 0x20: "SW thermal", 0x40: "HW thermal", 0x80: "HW power brake",
               0x100: "display clocks"}


def reason_names(mask):
    return [name for bit, name in sorted(REASON_BITS.items()) if mask & bit]


class ClockSampler:
    """nvidia-smi --query-gpu ... -lms PERIOD in the background; each line stamped with this
    process's clock (time.time()) as it arrives, kept in memory and written to `path`."""

    def __init__(self, smi, path, period_ms=250):
        self.smi, self.path, self.period_ms = smi, path, period_ms
        self.samples = []  # (t, sm_mhz, mem_mhz, power_w, temp_c, reasons or None)
        self.proc, self.thread, self.fields, self.why = None, None, None, None

    def _query(self, fields):
        try:
            r = subprocess.run([self.smi, "--query-gpu=" + fields, "--format=csv,noheader,nounits"],
                               capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired) as e:
            return False, str(e)
        return r.returncode == 0, (r.stdout + r.stderr).strip()

    def start(self):
        """Starts sampling; False (with self.why) where nvidia-smi cannot give the fields."""
        for extra in REASONS + ("",):
            fields = FIELDS + ("," + extra if extra else "")
            ok, text = self._query(fields)
            if ok:
                self.fields = fields
                break
            self.why = text
        if not self.fields:
            return False
        self.proc = subprocess.Popen([self.smi, "--query-gpu=" + self.fields,
                                      "--format=csv,noheader,nounits", "-lms", str(self.period_ms)],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        return True

    def _read(self):
        with open(self.path, "w") as f:
            f.write("time_s," + self.fields + "\n")
            for line in self.proc.stdout:
                t = time.time()
                f.write("%.3f,%s\n" % (t, line.strip()))
                f.flush()
                v = [x.strip() for x in line.split(",")]
                try:
                    reasons = int(v[4], 16) if len(v) > 4 else None
                    self.samples.append((t, float(v[0]), float(v[1]), float(v[2]), float(v[3]), reasons))
                except (ValueError, IndexError):
                    continue  # "[N/A]" or a line cut short: kept in the file, not summed

    def stop(self):
        if self.proc:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if self.thread:
            self.thread.join(timeout=5)

    def span(self, t0, t1):
        """The samples between t0 and t1 summed up, or None where there are none."""
        s = [x for x in self.samples if t0 <= x[0] <= t1]
        if not s:
            return None
        mask = 0
        for x in s:
            mask |= x[5] or 0
        return dict(samples=len(s), sm_mhz_median=statistics.median(x[1] for x in s),
                    sm_mhz_min=min(x[1] for x in s), mem_mhz_median=statistics.median(x[2] for x in s),
                    power_w_median=round(statistics.median(x[3] for x in s), 1),
                    power_w_max=max(x[3] for x in s), temp_c_max=max(x[4] for x in s),
                    reasons=reason_names(mask) if any(x[5] is not None for x in s) else None)


def line(part, c):
    return "  %-22s SM %5.0f MHz median, %5.0f lowest; power %6.1f W median, %6.1f highest; %3.0f C%s" % (
        part, c["sm_mhz_median"], c["sm_mhz_min"], c["power_w_median"], c["power_w_max"], c["temp_c_max"],
        "; " + (", ".join(c["reasons"]) or "no clock event reason") if c["reasons"] is not None else "")


def start_if(smi, out_dir):
    """A started sampler writing out_dir/clocks.csv, or (None, why)."""
    if not smi:
        return None, "no nvidia-smi"
    s = ClockSampler(smi, os.path.join(out_dir, "clocks.csv"))
    if not s.start():
        return None, "nvidia-smi cannot query %s: %s" % (FIELDS, s.why)
    return s, None
