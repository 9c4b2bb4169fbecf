#!/usr/bin/env bash
# Plots and the report for apps/experiments/run.sh.  plot.sh OUT_DIR TINY(0|1)
set -euo pipefail
out=$1
tiny=${2:-0}
runs="$out/runs"
plots="$out/plots"
mkdir -p "$plots"
here=$(cd "$(dirname "$0")" && pwd)

# Smoothed training loss per run (moving average over 20 clocks), worker 0: clock,wall_s,loss
# (clock rows only: not the epochs' evaluation rows, kind "eval")
smooth() { awk -F, 'NR > 1 && $6 != "eval" { k++; i = (k - 1) % 20; s += $3 - b[i]; b[i] = $3; n = (k < 20) ? k : 20; print $1 "," $2 "," s / n }' "$1"; }

if [ "$tiny" = 1 ]; then
  f=$(ls "$runs"/*.w0.csv | head -1)
  smooth "$f" > "$plots/tiny.dat"
  gnuplot <<GP
set terminal pngcairo size 640,400 noenhanced
set output "$plots/tiny_loss_vs_clock.png"
set datafile separator ","
set xlabel "clock"; set ylabel "training loss (moving average)"
plot "$plots/tiny.dat" using 1:3 with lines title "$(basename "$f" .w0.csv)"
GP
  [ -s "$plots/tiny_loss_vs_clock.png" ] || { echo "plot missing"; exit 1; }
  echo "tiny plot: $plots/tiny_loss_vs_clock.png"
  exit 0
fi

models="bsp ssp1 ssp2 ssp4 ssp8 asp"
for app in fmnist_mlp sparse_lr; do
  for strag in none random; do
    cmd_wall=""; cmd_clock=""
    for m in $models; do
      f="$runs/${app}_${m}_${strag}_s1.w0.csv"
      [ -f "$f" ] || continue
      smooth "$f" > "$plots/${app}_${m}_${strag}.dat"
      cmd_wall+="\"$plots/${app}_${m}_${strag}.dat\" using 2:3 with lines lw 2 title \"$m\", "
      cmd_clock+="\"$plots/${app}_${m}_${strag}.dat\" using 1:3 with lines lw 2 title \"$m\", "
    done
    [ -n "$cmd_wall" ] || continue
    gnuplot <<GP
set terminal pngcairo size 1200,450 noenhanced
set output "$plots/${app}_${strag}_loss.png"
set datafile separator ","
set multiplot layout 1,2 title "$app, stragglers: $strag (worker 0, seed 1; moving average of 20 clocks)"
set xlabel "wall seconds"; set ylabel "training loss"; set key top right
plot ${cmd_wall%, }
set xlabel "clock"
plot ${cmd_clock%, }
unset multiplot
GP
  done
  # Time to target against the staleness bound (ASP drawn at 16), mean over seeds; a bound where
  # a seed missed the target is left out (its mean would be that of the runs that made it: the
  # table gives reached / made).
  for strag in none random; do
    awk -F, -v app=$app -v s=$strag 'NR > 1 && $1 == app && $4 == s {
        b = ($3 < 0) ? 16 : $3; runs[b]++; if ($6 != "") { t[b] += $6; n[b]++ } }
      END { for (b in runs) if (n[b] == runs[b]) print b, t[b] / n[b] }' "$out/summary.csv" | sort -n > "$plots/${app}_ttt_${strag}.dat"
    awk -F, -v app=$app -v s=$strag 'NR > 1 && $1 == app && $4 == s && $9 != "" {
        b = ($3 < 0) ? 16 : $3; t[b] += $9; n[b]++ }
      END { for (b in t) print b, t[b] / n[b] }' "$out/summary.csv" | sort -n > "$plots/${app}_wait_${strag}.dat"
  done
  gnuplot <<GP
set terminal pngcairo size 1200,450 noenhanced
set output "$plots/${app}_time_to_target.png"
set multiplot layout 1,2 title "$app: time to target (bounds where every seed reached it) and waiting time against the staleness bound (ASP at 16)"
set xlabel "staleness bound s (0 = BSP)"; set ylabel "seconds to target"; set logscale x 2; set xrange [0.5:20]
set xtics ("BSP" 0.5, "1" 1, "2" 2, "4" 4, "8" 8, "ASP" 16)
f(x) = x == 0 ? 0.5 : x
plot "$plots/${app}_ttt_none.dat" using (f(\$1)):2 with linespoints lw 2 title "no stragglers", \
     "$plots/${app}_ttt_random.dat" using (f(\$1)):2 with linespoints lw 2 title "random stragglers"
set ylabel "fraction of step time waiting for pulls"; set yrange [0:1]
plot "$plots/${app}_wait_none.dat" using (f(\$1)):2 with linespoints lw 2 title "no stragglers", \
     "$plots/${app}_wait_random.dat" using (f(\$1)):2 with linespoints lw 2 title "random stragglers"
unset multiplot
GP
  # Histogram of observed staleness per model (all workers, stragglers on, seed 1).
  rm -f "$plots/${app}_hist.dat"
  for m in $models; do
    cat "$runs/${app}_${m}_random_s1".w*.csv 2>/dev/null | awk -F, -v m=$m '$1 != "clock" && $6 != "eval" { c[$5]++; n++ }
      END { for (s in c) printf "%s %d %.5f\n", m, s, c[s] / n }' | sort -k2 -n >> "$plots/${app}_hist.dat"
  done
  gnuplot <<GP
set terminal pngcairo size 900,450 noenhanced
set output "$plots/${app}_staleness_hist.png"
set title "$app: observed staleness of pulls (all workers, random stragglers)"
set xlabel "staleness (own clock - slowest worker's clock)"; set ylabel "fraction of pulls"; set logscale y
set xrange [-0.5:20.5]
plot for [m in "$models"] "< grep '^".m." ' $plots/${app}_hist.dat" using 2:3 with linespoints lw 2 title m
GP
done
# Staleness-aware scaling.
rm -f "$plots/sa.dat"
for tag in plain sa; do
  for m in ssp8 asp; do
    f="$runs/fmnist_mlp_${m}_random_s1_${tag}.w0.csv"
    [ -f "$f" ] && smooth "$f" > "$plots/sa_${m}_${tag}.dat"
  done
done
gnuplot <<GP
set terminal pngcairo size 900,450 noenhanced
set output "$plots/staleness_aware.png"
set datafile separator ","
set title "fmnist_mlp, lr 0.004, random stragglers: plain vs staleness-aware steps"
set xlabel "clock"; set ylabel "training loss (moving average)"
plot "$plots/sa_ssp8_plain.dat" using 1:3 with lines lw 2 title "SSP(8)", \
     "$plots/sa_ssp8_sa.dat" using 1:3 with lines lw 2 title "SSP(8), staleness-aware", \
     "$plots/sa_asp_plain.dat" using 1:3 with lines lw 2 title "ASP", \
     "$plots/sa_asp_sa.dat" using 1:3 with lines lw 2 title "ASP, staleness-aware"
GP

# The report: the hand-written analysis, then the measured table.
mkdir -p docs/experiments
cp "$plots"/*.png docs/experiments/
{
  cat "$here/EXPERIMENTS.head.md"
  echo
  echo "## Measured (generated by \`make experiments\` on $(date -u +%Y-%m-%d), $(nproc) cores)"
  echo
  echo "Means over seeds. Time to target: fmnist_mlp test accuracy (1000-image subset) >= 0.86;"
  echo "sparse_lr held-out log loss within 5% of the optimum. Wait: fraction of step time spent waiting"
  echo "for pulls (all workers). Max staleness: largest staleness any pull observed. Final metric:"
  echo "fmnist_mlp test accuracy (10k images), sparse_lr held-out AUC. \`_sa\`: staleness-aware steps."
  echo
  echo "Time and clocks to target are means over the runs that reached it; runs: reached / made."
  echo
  echo "| app | model | stragglers | time to target (s) | clocks to target | wait | max staleness | final metric | runs |"
  echo "|---|---|---|---|---|---|---|---|---|"
  awk -F, 'NR > 1 { k = $1 "|" $2 "|" $4; n[k]++; if ($6 != "") { t[k] += $6; c[k] += $7; hit[k]++ }
      w[k] += $9; if ($10 > ms[k]) ms[k] = $10; fm[k] += $8; order[k] = NR }
    END { for (k in n) { split(k, a, "|");
        printf "| %s | %s | %s | %s | %s | %.2f | %d | %.4f | %d / %d |\n", a[1], a[2], a[3],
          hit[k] ? sprintf("%.1f", t[k] / hit[k]) : "not reached", hit[k] ? sprintf("%.0f", c[k] / hit[k]) : "-",
          w[k] / n[k], ms[k], fm[k] / n[k], hit[k], n[k] } }' "$out/summary.csv" | sort -t'|' -k2,2 -k4,4 -k3,3
  echo
  echo "Plots:"
  echo
  for p in fmnist_mlp_none_loss fmnist_mlp_random_loss fmnist_mlp_time_to_target fmnist_mlp_staleness_hist \
           sparse_lr_none_loss sparse_lr_random_loss sparse_lr_time_to_target sparse_lr_staleness_hist staleness_aware; do
    echo "![$p](experiments/$p.png)"
    echo
  done
} > docs/EXPERIMENTS.md
echo "report: docs/EXPERIMENTS.md"
