#include "fetch/s3/s3_model.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "fetch/meta_cache.h"
#include "fetch/model_folder.h"
#include "fetch/s3/s3_origin.h"
#include "fetch/sha256.h"
#include "format/error.h"

namespace aprfs {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxSmallFile = 256ull << 20;

bool EndsWith(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

// The folder part of a key relative to the source ("" at the source itself).
std::string FolderOf(const std::string& relative) {
  size_t slash = relative.rfind('/');
  return slash == std::string::npos ? "" : relative.substr(0, slash);
}

std::string BaseName(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Where the metadata of one endpoint's bucket lives: the endpoint is part of the name, so two
// stores with a bucket of the same name never share entries.
std::string BucketMetaDir(const std::string& cache_dir, const S3Client& client,
                          const std::string& bucket) {
  return cache_dir + "/meta/s3/" + Sha256Hex(client.config().endpoint + "\n" + bucket).substr(0, 24);
}

std::string ListingJson(const std::vector<S3Object>& objects) {
  json items = json::array();
  for (const S3Object& object : objects) {
    items.push_back({{"key", object.key}, {"size", object.size}, {"etag", object.etag}});
  }
  return items.dump();
}

std::optional<std::vector<S3Object>> ParseListingJson(const std::string& text) {
  try {
    std::vector<S3Object> objects;
    for (const json& item : json::parse(text)) {
      objects.push_back({item.at("key").get<std::string>(), item.at("size").get<uint64_t>(),
                         item.at("etag").get<std::string>()});
    }
    return objects;
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

// An object's bytes (or a range of them) in the metadata cache: named by key, size and ETag,
// so a replaced object is never answered from an old entry.
std::string ObjectMetaPath(const std::string& bucket_dir, const S3Object& object,
                           const std::string& what) {
  return bucket_dir + "/objects/" +
         Sha256Hex(object.key + "\n" + std::to_string(object.size) + "\n" + object.etag) + "." + what;
}

// What a model needs of its folder, with the metadata cache in front of the store.
class FolderReader {
 public:
  FolderReader(RemoteContext& context, const S3Client& client, const S3ModelRef& model)
      : client_(client),
        model_(model),
        bucket_dir_(BucketMetaDir(context.settings().cache_dir, client, model.folder.bucket)) {
    const std::string base = model_.folder.prefix.empty() ? "" : model_.folder.prefix + "/";
    for (const S3Object& object : model_.objects) {
      if (object.key.rfind(base, 0) == 0) files_[object.key.substr(base.size())] = &object;
    }
  }

  const S3Object* Find(const std::string& path) const {
    auto it = files_.find(path);
    return it == files_.end() ? nullptr : it->second;
  }
  std::string Where(const std::string& path) const { return model_.folder.ToString() + "/" + path; }

  std::string SmallFile(const S3Object& object) const {
    const std::string cached = ObjectMetaPath(bucket_dir_, object, "file");
    if (auto text = ReadFileIfExists(cached, kMaxSmallFile)) return *text;
    std::string text = client_.Get(model_.folder.bucket, object, kMaxSmallFile);
    WriteAtomically(cached, text);
    return text;
  }

  Shard ShardHeader(const std::string& path) const {
    const S3Object* object = Find(path);
    if (!object) {
      throw FormatError(std::string(kWeightIndexFile) + ": shard " + Quote(path) +
                        " is not an object of " + model_.folder.ToString());
    }
    const std::string cached = ObjectMetaPath(bucket_dir_, *object, "header");
    std::optional<std::string> bytes = ReadFileIfExists(cached, kMaxSafetensorsHeaderLen + 8);
    if (!bytes) {
      bytes = SafetensorsHeaderByRanges(object->size, Where(path), [&](uint64_t begin,
                                                                     uint64_t length) {
        return client_.GetRange(model_.folder.bucket, *object, begin, length);
      });
      WriteAtomically(cached, *bytes);
    }
    Shard shard;
    shard.file = path;
    shard.size = object->size;
    shard.header = ParseSafetensorsHeader(std::string_view(*bytes).substr(8), object->size,
                                          Where(path));
    return shard;
  }

  // The index, config and tokenizer, and the shards' paths (the rules of a local folder).
  ShardSet SideFiles(std::vector<std::string>& shard_files) const {
    ModelFolder folder;
    folder.where = model_.folder.ToString();
    for (const auto& [path, object] : files_) {
      if (path.find('/') == std::string::npos) folder.files.insert(path);
    }
    folder.read = [this](const std::string& path) { return SmallFile(*Find(path)); };
    folder.name_of = [this](const std::string& path) { return Where(path); };
    ShardSet set = ReadModelFolder(folder, shard_files);
    set.name = model_.Name();
    set.source = model_.folder.ToString();
    return set;
  }

 private:
  const S3Client& client_;
  const S3ModelRef model_;  // a copy: the reader lives as long as the model's files
  const std::string bucket_dir_;
  std::map<std::string, const S3Object*> files_;  // into model_.objects, by path in the folder
};

}  // namespace

std::string S3ModelRef::Name() const {
  return folder.prefix.empty() ? folder.bucket : BaseName(folder.prefix);
}

std::string S3ModelRef::Group() const {
  size_t slash = folder.prefix.rfind('/');
  if (slash != std::string::npos) return BaseName(folder.prefix.substr(0, slash));
  return folder.prefix.empty() ? "" : folder.bucket;
}

std::string S3ModelRef::Fingerprint() const {
  std::string text;
  for (const S3Object& object : objects) {
    text += object.key + "\n" + std::to_string(object.size) + "\n" + object.etag + "\n";
  }
  return text;
}

std::vector<S3ModelRef> FindS3Models(const S3Uri& source, const std::vector<S3Object>& listing) {
  const std::string base = source.prefix.empty() ? "" : source.prefix + "/";
  std::set<std::string> folders;  // relative to the source
  for (const S3Object& object : listing) {
    if (object.key.rfind(base, 0) != 0) continue;  // "models-old/x" under prefix "models"
    const std::string relative = object.key.substr(base.size());
    const std::string name = BaseName(relative);
    if (name == kWeightIndexFile || EndsWith(name, ".safetensors")) {
      folders.insert(FolderOf(relative));
    }
  }
  // A folder inside a model's (its shards in a subfolder) is part of that model, as it is for
  // a local source whose folder holds the shards itself.
  auto inside_another = [&](const std::string& folder) {
    return std::any_of(folders.begin(), folders.end(), [&](const std::string& other) {
      return other != folder && (other.empty() || folder.rfind(other + "/", 0) == 0);
    });
  };
  std::vector<std::string> model_folders;
  for (const std::string& folder : folders) {
    if (!inside_another(folder)) model_folders.push_back(folder);
  }
  std::vector<S3ModelRef> models;
  for (const std::string& folder : model_folders) {
    S3ModelRef model;
    model.folder.bucket = source.bucket;
    model.folder.prefix = folder.empty() ? source.prefix : base + folder;
    const std::string inside = model.folder.prefix.empty() ? "" : model.folder.prefix + "/";
    for (const S3Object& object : listing) {
      if (object.key.rfind(inside, 0) == 0) model.objects.push_back(object);
    }
    std::sort(model.objects.begin(), model.objects.end(),
              [](const S3Object& a, const S3Object& b) { return a.key < b.key; });
    models.push_back(std::move(model));
  }
  return models;
}

SourceListing ListS3Source(const S3Client& client, const S3Uri& source,
                           const std::string& cache_dir) {
  const std::string cached = BucketMetaDir(cache_dir, client, source.bucket) + "/listings/" +
                             Sha256Hex(source.prefix).substr(0, 24) + ".json";
  std::optional<std::string> text = ReadFileIfExists(cached, kMaxSmallFile);
  std::optional<std::vector<S3Object>> kept = text ? ParseListingJson(*text) : std::nullopt;
  try {
    // "models/" rather than "models": objects of a folder "models-old" are not ours. With a
    // listing kept, a store that does not answer at once is not waited for long.
    std::vector<S3Object> objects = client.List(
        source.bucket, source.prefix.empty() ? "" : source.prefix + "/", kept ? 2 : 0);
    WriteAtomically(cached, ListingJson(objects));
    return {std::move(objects), ""};
  } catch (const S3Error& e) {
    if (!e.transient()) throw;
    if (!kept) {
      throw S3Error(e.kind(), std::string(e.what()) + "; no listing kept by an earlier mount");
    }
    spdlog::warn("{}: using the listing kept by an earlier mount ({})", source.ToString(), e.what());
    return {std::move(*kept),
            std::string(e.what()) + "; the listing kept by an earlier mount is used"};
  }
}

LoadedModel LoadS3Model(RemoteContext& context, const S3Client& client, const S3ModelRef& model) {
  auto reader = std::make_shared<FolderReader>(context, client, model);
  LoadedModel loaded;
  std::vector<std::string> shard_files;
  ShardSet side = reader->SideFiles(shard_files);
  loaded.set.name = side.name;
  loaded.set.source = side.source;
  loaded.set.index = std::move(side.index);
  for (const std::string& path : shard_files) {
    Shard shard = reader->ShardHeader(path);
    const S3Object& object = *reader->Find(path);
    RemoteBlob blob;
    blob.name = model.folder.ToString() + "/" + path;
    blob.path = path;
    blob.size = object.size;
    blob.revision = ServerValidator{ServerValidator::Kind::StrongEtag, object.etag}.NormalizedEtag();
    // The store's name and the identity of the bytes: the endpoint, the object and its version.
    const std::string id = Sha256Hex(client.config().endpoint + "\n" + model.folder.bucket + "\n" +
                                     object.key + "\n" + object.etag + "\n" +
                                     std::to_string(object.size));
    blob.identity = "s3:" + id;
    auto store = context.chunks().Store("s3-" + id.substr(0, 40), object.size);
    loaded.sources.push_back(std::make_shared<RemoteFile>(
        blob, std::make_unique<S3Origin>(client, model.folder.bucket, object), store,
        context.chunks(), context.fetcher(), context.settings().options));
    loaded.set.shards.push_back(std::move(shard));
  }
  // Data is laid out in shard order: a sequential reader goes from one shard into the next.
  for (size_t i = 0; i + 1 < loaded.sources.size(); ++i) {
    auto current = std::static_pointer_cast<RemoteFile>(loaded.sources[i]);
    current->SetNext(std::static_pointer_cast<RemoteFile>(loaded.sources[i + 1]));
  }
  loaded.set.config = std::move(side.config);
  loaded.set.tokenizer = std::move(side.tokenizer);
  // Everything is pinned by the listed ETags and cached: a reload needs no network.
  loaded.read_text = [reader](const std::string& path) -> std::optional<std::string> {
    const S3Object* object = reader->Find(path);
    if (!object) return std::nullopt;
    return reader->SmallFile(*object);
  };
  loaded.reload = [reader, shard_files] {
    std::vector<std::string> now;
    ShardSet set = reader->SideFiles(now);
    for (const std::string& path : shard_files) set.shards.push_back(reader->ShardHeader(path));
    return set;
  };
  return loaded;
}

}  // namespace aprfs
