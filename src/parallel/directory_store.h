// The key-value store that the processes of one run share through a directory every one of them
// sees (parallel.coordination_dir): what a PJRT plugin exchanges when one program spans processes
// (the CUDA plugin's topologies and NCCL ids). No server of our own: a put writes a temporary file
// and renames it (atomic, so a reader sees all of a value or nothing); a get waits for the file.
//
// Liveness: each process keeps <run>/alive.<rank> fresh from a thread (a counter rewritten every
// second; "ended" when the store is destroyed). A get that waits reads the others' heartbeats; one
// unchanged for kLostAfter, or ended, fails the get with a message naming that rank and the key.
// A killed process cannot say so, hence the staleness; clock skew between hosts does not matter,
// as each reader times a peer's counter with its own clock.
//
// Leftovers: the directory outlives a run (by default <train.out_dir>/coordination, which a resume
// reuses), so keys live under a run id that rank 0 draws at random, and the others learn it
// through a handshake no earlier run's files can satisfy. Rank r > 0 writes a fresh random nonce
// to join.<r>; rank 0 writes `run` = "<run id> <count>" and one nonce per rank as it finds them in
// the join files (rewriting it while they change); a rank that finds its own nonce there takes the
// run id, starts its heartbeat and writes ack.<r> = "<run id> <nonce>"; once every ack names rank
// 0's run id and the nonce it listed, rank 0 writes <run>/joined, which every rank waits for, and
// removes earlier runs' directories. One run per directory at a time.
#pragma once

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "parallel/process_group.h"

namespace lmt {

class DirectoryStore {
 public:
  static constexpr std::chrono::seconds kHeartbeatEvery{1};
  static constexpr std::chrono::seconds kLostAfter{10};

  // Creates `dir` if needed and joins the others of `group` (count > 1), waiting up to `timeout`
  // for them; UserError on a timeout, naming the rank that did not join.
  DirectoryStore(const std::filesystem::path& dir, const ProcessGroup& group,
                 std::chrono::seconds timeout);
  ~DirectoryStore();
  DirectoryStore(const DirectoryStore&) = delete;
  DirectoryStore& operator=(const DirectoryStore&) = delete;

  // All three are thread-safe (a plugin calls them from its own threads).
  void put(const std::string& key, const std::string& value);
  // Waits up to the store's timeout (or `limit`, if shorter) for the key. UserError when a peer
  // is lost meanwhile (naming its rank and the key) or the time runs out.
  std::string get(const std::string& key,
                  std::chrono::milliseconds limit = std::chrono::milliseconds::max());
  // As get, but waits up to `limit` even when it is longer than the store's timeout (a rank
  // waiting for rank 0 to write a checkpoint); `what` says in a timeout's message what it waited
  // for. A lost peer still ends the wait within kLostAfter, and so does `give_up` when it returns
  // a reason (asked at every poll; its reason ends the message).
  std::string wait(const std::string& key, std::chrono::seconds limit, const std::string& what,
                   const std::function<std::string()>& give_up = nullptr);
  std::optional<std::string> try_get(const std::string& key) const;
  // Removes the key's file (a key nobody reads any more); no error when it is gone.
  void remove(const std::string& key);

  const ProcessGroup& group() const { return group_; }
  const std::string& run_id() const { return run_id_; }
  // The message of the last get that failed, "" if none: for a caller that hears of the failure
  // through a plugin, which wraps it in its own words.
  std::string failure() const;

 private:
  void join();
  void join_as_rank0();
  void join_as_other();
  void start_heartbeat();
  void heartbeat_loop();
  void stop_heartbeat() noexcept;  // and marks this rank's heartbeat "ended"
  // get and wait: polls for the key up to `limit`, which `limit_name` names in the message.
  std::string await(const std::string& key, std::chrono::milliseconds limit,
                    const std::string& limit_name,
                    const std::function<std::string()>& give_up = nullptr);
  // The first peer found lost or ended, described; "" while all are alive (or when read lately).
  std::string lost_peer();
  std::filesystem::path alive_path(int rank) const;
  std::filesystem::path key_path(const std::string& key) const;

  std::filesystem::path dir_, run_dir_;
  ProcessGroup group_;
  std::chrono::seconds timeout_;
  std::string run_id_;

  mutable std::mutex mutex_;  // guards what follows
  struct Peer {
    std::string beat;  // the heartbeat file's content when last read
    std::chrono::steady_clock::time_point changed;
  };
  std::map<int, Peer> peers_;
  std::chrono::steady_clock::time_point peers_read_{};
  std::string failure_;
  bool stop_ = false;
  std::condition_variable wake_;
  std::thread heartbeat_;
};

}  // namespace lmt
