# Sourced by the scripts that run on a lent GPU (gpu_lease.sh, gpu_profile.sh, gpu_trace.sh), after
# they set pack (made by scripts/gpu_pack.sh), deadline (seconds), out and w (a scratch folder):
# unpacks the pack into $w, installs the demo's corpus at /usr/share/games/fortunes if missing,
# and sets bin (lmtrain), plugin (the CUDA PJRT plugin of the jax-cuda13-pjrt wheel, or
# GPU_LEASE_PLUGIN), left (seconds to the deadline) and cap N (N, or what is left if less).
rm -rf "$w" && mkdir -p "$w/logs" "$out"
tar xzf "$pack" -C "$w" || exit 1
[ -d /usr/share/games/fortunes ] || { mkdir -p /usr/share/games && cp -r "$w/fortunes" /usr/share/games/; }
export LD_LIBRARY_PATH="$w/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
bin=$w/lmtrain
left() { echo $((deadline - SECONDS)); }
cap() { local l=$(($(left) - 5)); ((l > 1)) || l=1; echo $((l < $1 ? l : $1)); }
plugin=${GPU_LEASE_PLUGIN:-}
[ -n "$plugin" ] || plugin=$(python3 -c 'import glob, os, jax_plugins; print(next(iter(sorted(l for d in jax_plugins.__path__ for l in glob.glob(os.path.join(d, "*cuda*", "*.so")))), ""))' 2>/dev/null)
[ -n "$plugin" ] || { echo "no CUDA PJRT plugin"; exit 1; }
