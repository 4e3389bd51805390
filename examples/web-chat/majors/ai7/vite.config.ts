import { fileURLToPath } from "node:url";
import { majorConfig } from "../vite.shared";

export default majorConfig(fileURLToPath(new URL(".", import.meta.url)), "7");
