// The download worker pool (fetch/fetcher.h): demand tasks before prefetch, background last;
// tasks run concurrently up to the worker count; destruction with queued tasks returns; the
// commit and verify lanes run beside the workers, and commits queued at destruction still run.
#include "fetch/fetcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace aprfs {
namespace {

using Priority = Fetcher::Priority;
using namespace std::chrono_literals;

// A one-shot gate tasks wait on. Tests declare their gates (and whatever else tasks touch)
// before the Fetcher: its destructor joins the threads, so they are gone before the gates are.
class Gate {
 public:
  void Open() {
    {
      std::lock_guard lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  bool Wait(std::chrono::milliseconds timeout = 30s) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

template <typename Predicate>
bool WaitFor(Predicate done, std::chrono::milliseconds timeout = 30s) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

TEST(FetcherTest, WorkerCount) {
  EXPECT_EQ(Fetcher(3).workers(), 3u);
  EXPECT_EQ(Fetcher(0).workers(), 1u) << "zero workers would never run anything";
}

TEST(FetcherTest, DemandBeforePrefetchBeforeBackground) {
  Gate started, release;
  Fetcher fetcher(1);
  fetcher.Submit(Priority::Background, [&] {
    started.Open();
    release.Wait();
  });
  ASSERT_TRUE(started.Wait()) << "the first task never ran";

  std::mutex mu;
  std::vector<std::string> order;
  auto record = [&](std::string name) {
    return [&, name] {
      std::lock_guard lock(mu);
      order.push_back(name);
    };
  };
  // Queued while the only worker is busy, in an order that is the reverse of priority.
  fetcher.Submit(Priority::Background, record("B1"));
  fetcher.Submit(Priority::Prefetch, record("P1"));
  fetcher.Submit(Priority::Background, record("B2"));
  fetcher.Submit(Priority::Demand, record("D1"));
  fetcher.Submit(Priority::Prefetch, record("P2"));
  fetcher.Submit(Priority::Demand, record("D2"));
  EXPECT_EQ(fetcher.Queued(Priority::Demand), 2u);
  EXPECT_EQ(fetcher.Queued(Priority::Prefetch), 2u);
  EXPECT_EQ(fetcher.Queued(Priority::Background), 2u);

  release.Open();
  ASSERT_TRUE(WaitFor([&] {
    std::lock_guard lock(mu);
    return order.size() == 6;
  }));
  EXPECT_EQ(order, (std::vector<std::string>{"D1", "D2", "P1", "P2", "B1", "B2"}));
  EXPECT_EQ(fetcher.Queued(Priority::Demand), 0u);
  EXPECT_EQ(fetcher.Queued(Priority::Prefetch), 0u);
  EXPECT_EQ(fetcher.Queued(Priority::Background), 0u);
}

TEST(FetcherTest, DemandSubmittedLaterOvertakesQueuedPrefetch) {
  // The worker is busy; a long prefetch backlog builds up; a demand task submitted afterwards
  // runs next, ahead of the whole backlog.
  Gate started, release;
  Fetcher fetcher(1);
  fetcher.Submit(Priority::Prefetch, [&] {
    started.Open();
    release.Wait();
  });
  ASSERT_TRUE(started.Wait());
  std::atomic<int> prefetch_done{0};
  std::atomic<int> prefetch_done_before_demand{-1};
  for (int i = 0; i < 50; ++i) {
    fetcher.Submit(Priority::Prefetch, [&] { prefetch_done.fetch_add(1); });
  }
  fetcher.Submit(Priority::Demand, [&] { prefetch_done_before_demand = prefetch_done.load(); });
  release.Open();
  ASSERT_TRUE(WaitFor([&] { return prefetch_done.load() == 50; }));
  ASSERT_TRUE(WaitFor([&] { return prefetch_done_before_demand.load() >= 0; }));
  EXPECT_EQ(prefetch_done_before_demand.load(), 0);
}

TEST(FetcherTest, RunsTasksConcurrentlyUpToTheWorkerCount) {
  constexpr unsigned kWorkers = 4;
  std::atomic<int> running{0}, max_running{0}, done{0};
  Gate release;
  Fetcher fetcher(kWorkers);
  auto task = [&] {
    int now = running.fetch_add(1) + 1;
    int seen = max_running.load();
    while (now > seen && !max_running.compare_exchange_weak(seen, now)) {
    }
    release.Wait();
    running.fetch_sub(1);
    done.fetch_add(1);
  };
  for (int i = 0; i < 10; ++i) fetcher.Submit(Priority::Prefetch, task);
  // All workers busy at once (they would deadlock on the gate if they ran one by one).
  ASSERT_TRUE(WaitFor([&] { return running.load() == static_cast<int>(kWorkers); }))
      << "only " << running.load() << " tasks ran at once";
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(running.load(), static_cast<int>(kWorkers)) << "more tasks than workers ran at once";
  EXPECT_EQ(fetcher.Queued(Priority::Prefetch), 10u - kWorkers);
  release.Open();
  ASSERT_TRUE(WaitFor([&] { return done.load() == 10; }));
  EXPECT_EQ(max_running.load(), static_cast<int>(kWorkers));
}

TEST(FetcherTest, DestructionWithQueuedTasksDoesNotHang) {
  std::atomic<int> ran{0};
  Gate started, release;
  auto fetcher = std::make_unique<Fetcher>(1);
  fetcher->Submit(Priority::Demand, [&] {
    started.Open();
    release.Wait();
  });
  ASSERT_TRUE(started.Wait());
  for (int i = 0; i < 100; ++i) {
    fetcher->Submit(static_cast<Priority>(i % 3), [&] { ran.fetch_add(1); });
  }
  // The destructor waits for the running task only; queued ones are dropped.
  auto destroyed = std::async(std::launch::async, [&] { fetcher.reset(); });
  EXPECT_EQ(destroyed.wait_for(50ms), std::future_status::timeout)
      << "the destructor did not wait for the running task";
  release.Open();
  ASSERT_EQ(destroyed.wait_for(30s), std::future_status::ready) << "~Fetcher hung";
  EXPECT_LT(ran.load(), 100) << "the queued tasks were run instead of dropped";
}

TEST(FetcherTest, IdleDestructionReturns) {
  auto destroyed = std::async(std::launch::async, [] { Fetcher fetcher(8); });
  EXPECT_EQ(destroyed.wait_for(30s), std::future_status::ready);
}

TEST(FetcherTest, TasksSubmittedFromTasksRun) {
  Fetcher fetcher(2);
  std::atomic<int> done{0};
  fetcher.Submit(Priority::Background, [&] {
    fetcher.Submit(Priority::Demand, [&] { done.fetch_add(1); });
    done.fetch_add(1);
  });
  EXPECT_TRUE(WaitFor([&] { return done.load() == 2; }));
}

TEST(FetcherTest, LanesRunBesideBusyWorkers) {
  // Every worker (connection) is busy: a commit and a verification still run, each on its lane,
  // and a long verification holds up neither the commits nor the workers' queue.
  Gate worker_started, release_worker, verify_started, release_verify;
  Fetcher fetcher(1);
  fetcher.Submit(Priority::Demand, [&] {
    worker_started.Open();
    release_worker.Wait();
  });
  ASSERT_TRUE(worker_started.Wait());
  fetcher.Submit(Fetcher::Lane::Verify, [&] {
    verify_started.Open();
    release_verify.Wait();
  });
  ASSERT_TRUE(verify_started.Wait()) << "the verify lane waited for a worker";
  std::atomic<int> commits{0};
  for (int i = 0; i < 3; ++i) fetcher.Submit(Fetcher::Lane::Commit, [&] { commits.fetch_add(1); });
  EXPECT_TRUE(WaitFor([&] { return commits.load() == 3; })) << "commits waited";
  EXPECT_EQ(fetcher.Queued(Fetcher::Lane::Commit), 0u);
  release_worker.Open();
  std::atomic<bool> next{false};
  fetcher.Submit(Priority::Prefetch, [&] { next = true; });
  EXPECT_TRUE(WaitFor([&] { return next.load(); })) << "the worker waited for the verification";
  release_verify.Open();
}

TEST(FetcherTest, CommitsQueuedAtDestructionRunVerificationsDoNot) {
  std::atomic<int> commits{0}, verifications{0};
  Gate started, release;
  auto fetcher = std::make_unique<Fetcher>(1);
  // The commit lane is held up by a first commit, the verify lane by a first verification.
  fetcher->Submit(Fetcher::Lane::Commit, [&] {
    started.Open();
    release.Wait();
    commits.fetch_add(1);
  });
  fetcher->Submit(Fetcher::Lane::Verify, [&] { release.Wait(); });
  ASSERT_TRUE(started.Wait());
  for (int i = 0; i < 5; ++i) {
    fetcher->Submit(Fetcher::Lane::Commit, [&] { commits.fetch_add(1); });
    fetcher->Submit(Fetcher::Lane::Verify, [&] { verifications.fetch_add(1); });
  }
  auto destroyed = std::async(std::launch::async, [&] { fetcher.reset(); });
  EXPECT_EQ(destroyed.wait_for(50ms), std::future_status::timeout);
  release.Open();
  ASSERT_EQ(destroyed.wait_for(30s), std::future_status::ready) << "~Fetcher hung";
  EXPECT_EQ(commits.load(), 6) << "queued commits were dropped (what was downloaded is lost)";
  EXPECT_EQ(verifications.load(), 0) << "queued verifications ran during the unmount";
}

}  // namespace
}  // namespace aprfs
